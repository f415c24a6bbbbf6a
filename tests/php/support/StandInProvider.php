<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * A local PSR-18 stand-in for the payment provider: `$answer` gives the status and the
 * headers of each request (e.g. 429 with a Retry-After); `sent` counts the requests that
 * reached it. No network: the client under test is the only thing between.
 */
final class StandInProvider implements ClientInterface
{
    public int $sent = 0;
    /** @var callable(RequestInterface, int): array{0: int, 1?: array<string, string>} */
    private $answer;

    /** @param callable(RequestInterface, int): array{0: int, 1?: array<string, string>} $answer */
    public function __construct(callable $answer)
    {
        $this->answer = $answer;
    }

    /** Always `$status`, with `$headers`. */
    public static function always(int $status, array $headers = []): self
    {
        return new self(fn () => [$status, $headers]);
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        $this->sent++;
        [$status, $headers] = ($this->answer)($request, $this->sent) + [1 => []];
        $response = (new Psr17Factory())->createResponse($status);
        foreach ($headers as $name => $value) {
            $response = $response->withHeader($name, $value);
        }
        return $response;
    }
}

/**
 * A stand-in provider with a real rate limit shared by every process that uses the same
 * state file (flock): a token bucket of `$rate` per second and `$burst` tokens, 200 while
 * it holds a token, 429 past it (with `$retryAfter` as its Retry-After when given). The
 * file also counts the answers: counts() gives ['ok' => n, 'throttled' => n].
 */
final class RateLimitedProvider implements ClientInterface
{
    public function __construct(private string $file, private float $rate, private int $burst, private ?string $retryAfter = null)
    {
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        $f = fopen($this->file, 'c+');
        flock($f, LOCK_EX);
        $raw = stream_get_contents($f);
        $now = microtime(true);
        $st = $raw !== '' && $raw !== false ? json_decode($raw, true) : ['tokens' => (float) $this->burst, 'at' => $now, 'ok' => 0, 'throttled' => 0];
        $st['tokens'] = min((float) $this->burst, $st['tokens'] + ($now - $st['at']) * $this->rate);
        $st['at'] = $now;
        $ok = $st['tokens'] >= 1.0;
        if ($ok) {
            $st['tokens'] -= 1.0;
            $st['ok']++;
        } else {
            $st['throttled']++;
        }
        ftruncate($f, 0);
        rewind($f);
        fwrite($f, json_encode($st));
        fflush($f);
        flock($f, LOCK_UN);
        fclose($f);
        $response = (new Psr17Factory())->createResponse($ok ? 200 : 429);
        return !$ok && $this->retryAfter !== null ? $response->withHeader('Retry-After', $this->retryAfter) : $response;
    }

    /** @return array{ok: int, throttled: int} */
    public static function counts(string $file): array
    {
        $st = json_decode((string) @file_get_contents($file), true) ?: [];
        return ['ok' => $st['ok'] ?? 0, 'throttled' => $st['throttled'] ?? 0];
    }
}
