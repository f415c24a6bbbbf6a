<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/** The project's own run scripts (scripts/*.sh) and the results they leave in .run/. */
final class ProjectScript
{
    public static function root(): string
    {
        return dirname(__DIR__, 3);
    }

    /**
     * Runs `scripts/$script $mode`, with `$env` added to the environment; a list as $mode
     * is the script's arguments (`['endpoints', 'smoke']`).
     * @param string|list<string> $mode
     * @param array<string, string> $env
     * @return array{0: int, 1: string} exit code, output
     */
    public static function run(string $script, string|array $mode, array $env = []): array
    {
        $prefix = '';
        foreach ($env as $name => $value) {
            $prefix .= $name . '=' . escapeshellarg($value) . ' ';
        }
        exec($prefix . 'bash ' . escapeshellarg(self::root() . "/scripts/$script") . ' ' . implode(' ', array_map('escapeshellarg', (array) $mode)) . ' 2>&1', $lines, $rc);
        return [$rc, implode("\n", $lines)];
    }

    /** A JSON file a run wrote under .run/, decoded. */
    public static function results(string $path): array
    {
        return json_decode((string) file_get_contents(self::root() . "/.run/$path"), true, 512, JSON_THROW_ON_ERROR);
    }
}
