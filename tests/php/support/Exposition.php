<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * CheckoutGuard\Metrics::render()'s output read by a real parser: Python's prometheus_client
 * (its text 0.0.4 parser, or its OpenMetrics parser), run by tests/support/prom_parse.py in
 * the project's .venv (scripts/setup.sh installs it). A test that needs it skips, saying so,
 * when python() is null.
 */
final class Exposition
{
    /** @param list<array{name: string, type: string, help: string}> $families
     *  @param list<array{name: string, labels: array<string, string>, value: float|int|string, family: string, type: string}> $samples */
    private function __construct(public readonly array $families, public readonly array $samples)
    {
    }

    /** The Python with prometheus_client, or null (then skip). */
    public static function python(): ?string
    {
        $python = dirname(__DIR__, 3) . '/.venv/bin/python';
        if (!is_executable($python)) {
            return null;
        }
        exec(escapeshellarg($python) . ' -c "import prometheus_client" 2>/dev/null', $out, $rc);
        return $rc === 0 ? $python : null;
    }

    /** Parses `$text`; a refusal of the parser throws, with its message and the text. */
    public static function parse(string $text, bool $openMetrics = false): self
    {
        $python = self::python() ?? throw new \RuntimeException('no prometheus_client in .venv: run scripts/setup.sh');
        $cmd = [$python, dirname(__DIR__, 3) . '/tests/support/prom_parse.py'];
        if ($openMetrics) {
            $cmd[] = '--openmetrics';
        }
        $p = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        fwrite($pipes[0], $text);
        fclose($pipes[0]);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        $rc = proc_close($p);
        $parsed = json_decode($out, true);
        if ($rc !== 0 || !is_array($parsed)) {
            throw new \UnexpectedValueException(trim($err) . "\n--- the exposition:\n$text");
        }
        return new self($parsed['families'], $parsed['samples']);
    }

    /** "name{a="x",b="y"}" (labels sorted by name; `le` as a number, so "1" and "1.0" agree). */
    public static function key(string $name, array $labels): string
    {
        if (isset($labels['le']) && $labels['le'] !== '+Inf') {
            $labels['le'] = (string) (float) $labels['le'];
        }
        ksort($labels);
        $pairs = [];
        foreach ($labels as $k => $v) {
            $pairs[] = $k . '=' . json_encode((string) $v, JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES);
        }
        return $name . '{' . implode(',', $pairs) . '}';
    }

    /**
     * The samples named `$names` by key() (zeros left out: a series not counted yet may be
     * absent or 0 alike), sorted by key.
     * @param list<string> $names
     * @return array<string, float>
     */
    public function nonZero(array $names): array
    {
        $out = [];
        foreach ($this->samples as $s) {
            if (in_array($s['name'], $names, true) && is_numeric($s['value']) && (float) $s['value'] !== 0.0) {
                $out[self::key($s['name'], $s['labels'])] = (float) $s['value'];
            }
        }
        ksort($out);
        return $out;
    }

    /** Every sample as key() => value (strings for +Inf/-Inf/NaN). @return array<string, float|string> */
    public function all(): array
    {
        $out = [];
        foreach ($this->samples as $s) {
            $out[self::key($s['name'], $s['labels'])] = is_numeric($s['value']) ? (float) $s['value'] : $s['value'];
        }
        return $out;
    }

    /** The samples named `$name`. @return list<array{name: string, labels: array<string, string>, value: float|int|string}> */
    public function named(string $name): array
    {
        return array_values(array_filter($this->samples, fn ($s) => $s['name'] === $name));
    }

    /** A family by name (the parser's name: a counter's without `_total`), or null. */
    public function family(string $name): ?array
    {
        foreach ($this->families as $f) {
            if ($f['name'] === $name) {
                return $f;
            }
        }
        return null;
    }
}
