<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests\Symfony;

use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;
use Symfony\Bundle\FrameworkBundle\Kernel\MicroKernelTrait;
use Symfony\Component\HttpClient\Response\MockResponse;
use Symfony\Component\HttpKernel\Kernel;
use Symfony\Contracts\HttpClient\HttpClientInterface;

/**
 * A Symfony application as `symfony new` lays one out, in a directory of its own:
 * config/bundles.php, config/packages/*.yaml, config/services.yaml, read by
 * MicroKernelTrait's defaults. SymfonyBundleTest writes the files and boots it (and loads
 * Debian's Symfony before this file).
 */
final class SymfonyKernel extends Kernel
{
    use MicroKernelTrait;

    /**
     * A new application in $dir with these YAML files under config/ (packages/x.yaml,
     * services.yaml); bundles.php registers FrameworkBundle and CheckoutGuardBundle.
     *
     * @param array<string, string> $files
     */
    public static function project(string $dir, array $files): void
    {
        $files += ['bundles.php' => "<?php\nreturn [\n"
            . "    Symfony\\Bundle\\FrameworkBundle\\FrameworkBundle::class => ['all' => true],\n"
            . "    CheckoutGuard\\Symfony\\CheckoutGuardBundle::class => ['all' => true],\n];\n"];
        foreach ($files as $name => $text) {
            $path = "$dir/config/$name";
            if (!is_dir(dirname($path))) {
                mkdir(dirname($path), 0777, true);
            }
            file_put_contents($path, $text);
        }
    }

    public function __construct(private string $dir)
    {
        parent::__construct('test', false);
    }

    public function getProjectDir(): string
    {
        return $this->dir;
    }

    public function getCacheDir(): string
    {
        return $this->dir . '/var/cache';
    }

    public function getLogDir(): string
    {
        return $this->dir . '/var/log';
    }
}

/** A checkout service of the application: its limiters and HTTP client come by autowiring. */
final class CheckoutService
{
    public function __construct(
        public Limiter $paymentsLimiter,
        public Limiter $refundsLimiter,
        public Limiter $limiter,
        public RateLimiter $rateLimiter,
        public HttpClientInterface $httpClient,
    ) {
    }
}

/** A service typed against the interface only: a fake can take the limiter's place. */
final class PaymentsUser
{
    public function __construct(
        public Limiter $paymentsLimiter,
        public Limiter $limiter,
        public HttpClientInterface $httpClient,
    ) {
    }
}

/**
 * The payment provider, for framework.http_client.mock_response_factory: a path of
 * /busy answers 429 with Retry-After: 2, /down fails as a refused connection does, any
 * other 200; every request that reached it is in $requests.
 */
final class ProviderStandIn
{
    /** @var list<array{0: string, 1: string}> */
    public static array $requests = [];

    public function __invoke(string $method, string $url, array $options = []): MockResponse
    {
        self::$requests[] = [$method, $url];
        if (parse_url($url, PHP_URL_PATH) === '/busy') {
            return new MockResponse('{"error":"slow down"}', ['http_code' => 429, 'response_headers' => ['Retry-After: 2']]);
        }
        if (parse_url($url, PHP_URL_PATH) === '/down') {
            return new MockResponse('', ['error' => 'connection refused']);
        }
        return new MockResponse('{"paid":true}', ['http_code' => 200]);
    }
}

/**
 * A test's stand-in for a limiter: it refuses everything with retry in 2 s and records
 * the shops it was asked for. The application's config/services.yaml puts it in place of
 * `checkout_guard.limiter.payments`, as a test environment would put a fake.
 */
final class RefusingLimiter implements Limiter
{
    /** @var list<string> */
    public array $asked = [];

    public function acquire(string|int $shopId, int $tokens = 1, float $maxWaitSeconds = 0.0, ?string $endpoint = null, ?string $priority = null): \CheckoutGuard\Decision
    {
        $this->asked[] = (string) $shopId;
        return new \CheckoutGuard\Decision(false, 'global', 2.0);
    }

    public function peek(string|int $shopId, int $tokens = 1, ?string $endpoint = null, ?string $priority = null): \CheckoutGuard\Decision
    {
        return new \CheckoutGuard\Decision(false, 'global', 2.0);
    }

    public function feedback(string|int $shopId, int $statusCode, ?float $retryAfterSeconds = null): void
    {
    }

    public function markHot(string|int $shopId, int $ttlSeconds): void
    {
    }

    public function unmarkHot(string|int $shopId): void
    {
    }

    public function isHot(string|int $shopId): bool
    {
        return false;
    }

    public function reset(): void
    {
    }
}
