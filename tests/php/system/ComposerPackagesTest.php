<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The repository's two Composer packages (docs/install.md, "Two Composer packages") as
 * Debian's composer (scripts/setup.sh installs it) judges them: the PHP library in php/
 * and the extension at the root. Composer is required here, not optional: without it the
 * test fails (the PHP matrix's chroots, which have no composer, run no system suite).
 */
final class ComposerPackagesTest extends TestCase
{
    private static string $home;

    public static function setUpBeforeClass(): void
    {
        self::$home = sys_get_temp_dir() . '/cg-composer-home-' . getmypid();
        @mkdir(self::$home, 0700, true);
    }

    public static function tearDownAfterClass(): void
    {
        exec('rm -rf ' . escapeshellarg(self::$home));
    }

    /** @return array{0: int, 1: string} composer's exit status and output */
    private static function composer(string $dir, string ...$args): array
    {
        $cmd = 'cd ' . escapeshellarg($dir) . ' && env COMPOSER_HOME=' . escapeshellarg(self::$home)
            . ' COMPOSER_ALLOW_SUPERUSER=1 COMPOSER_NO_INTERACTION=1 COMPOSER_DISABLE_NETWORK=1 composer --no-ansi '
            . implode(' ', array_map('escapeshellarg', $args)) . ' 2>&1';
        exec($cmd, $lines, $rc);
        return [$rc, implode("\n", $lines)];
    }

    private static function json(string $path): array
    {
        return json_decode((string) file_get_contents($path), true, 512, JSON_THROW_ON_ERROR);
    }

    protected function setUp(): void
    {
        exec('command -v composer', $out, $rc);
        $this->assertSame(0, $rc, 'composer is not installed: run scripts/setup.sh (Debian package composer)');
    }

    public function testTheLibraryValidatesForPublishing(): void
    {
        [$rc, $out] = self::composer(ProjectScript::root() . '/php', 'validate', '--strict');
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString('is valid', $out);
    }

    public function testTheExtensionPackageValidates(): void
    {
        $root = ProjectScript::root();
        $schema = (string) file_get_contents('/usr/share/php/data/Composer/res/composer-schema.json');
        if (str_contains($schema, '"php-ext"')) {
            // A Composer that knows PIE's php-ext section validates the file as it is.
            [$rc, $out] = self::composer($root, 'validate', '--strict');
            $this->assertSame(0, $rc, $out);
            return;
        }
        // Debian 12's Composer 2.5 predates the php-ext section (PIE's schema checks it:
        // loadtest/tests/test_composer.py): everything else is valid for publishing, and
        // the section is the one thing it names.
        [$rc, $out] = self::composer($root, 'validate', '--strict', '--no-check-publish');
        $this->assertSame(0, $rc, $out);
        [$rc, $out] = self::composer($root, 'validate', '--strict');
        $complaints = array_values(array_filter(explode("\n", $out), static fn($l) => str_starts_with($l, '- ')));
        $this->assertSame(['- The property php-ext is not defined and the definition does not allow additional properties'], $complaints, $out);
        $copy = sys_get_temp_dir() . '/cg-composer-ext-' . getmypid();
        @mkdir($copy);
        try {
            $ext = self::json("$root/composer.json");
            unset($ext['php-ext']);
            file_put_contents("$copy/composer.json", json_encode($ext, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
            [$rc, $out] = self::composer($copy, 'validate', '--strict');
            $this->assertSame(0, $rc, "the root composer.json without php-ext:\n$out");
        } finally {
            exec('rm -rf ' . escapeshellarg($copy));
        }
    }

    public function testTheLibraryNeedsThePhpTheExtensionNeeds(): void
    {
        $lib = self::json(ProjectScript::root() . '/php/composer.json');
        $ext = self::json(ProjectScript::root() . '/composer.json');
        $this->assertSame('>=8.2', $lib['require']['php']);
        $this->assertStringStartsWith($lib['require']['php'] . ' ', $ext['require']['php']);
        $this->assertSame('*', $lib['require']['ext-checkout_guard']);
        $this->assertSame(['CheckoutGuard\\' => 'src/'], $lib['autoload']['psr-4']);
        $this->assertSame(['psr-4'], array_keys($lib['autoload']), 'nothing but PSR-4 autoloaded: never the stubs');
        foreach (['symfony/framework-bundle', 'laravel/framework', 'guzzlehttp/guzzle'] as $suggested) {
            $this->assertArrayHasKey($suggested, $lib['suggest']);
        }
        $this->assertNotEmpty($lib['keywords']);
    }

    public function testTheStubsShippedWithTheLibraryAreTheExtensionsForIdesOnly(): void
    {
        $root = ProjectScript::root();
        $this->assertFileEquals("$root/stubs/checkout_guard.stubs.php", "$root/php/stubs/checkout_guard.php");
        $lib = self::json("$root/php/composer.json");
        $this->assertSame(['extension.neon'], $lib['extra']['phpstan']['includes']);
        $this->assertMatchesRegularExpression('~scanFiles:\s*\n\s*- stubs/checkout_guard\.php~', (string) file_get_contents("$root/php/extension.neon"));
    }

    /**
     * Composer's own autoloader for the library (as an application that requires it gets)
     * loads the classes from src/ and never the stubs, which would redeclare the
     * extension's classes.
     */
    public function testComposersAutoloaderLoadsTheLibraryAndNotTheStubs(): void
    {
        $copy = sys_get_temp_dir() . '/cg-composer-lib-' . getmypid();
        exec('rm -rf ' . escapeshellarg($copy) . ' && cp -r ' . escapeshellarg(ProjectScript::root() . '/php') . ' ' . escapeshellarg($copy));
        try {
            [$rc, $out] = self::composer($copy, 'dump-autoload');
            $this->assertSame(0, $rc, $out);
            $script = 'require $argv[1] . "/vendor/autoload.php";'
                . 'foreach (["Message", "Client"] as $p) { $f = "/usr/share/php/Psr/Http/$p/autoload.php"; if (is_file($f)) require_once $f; }'
                . 'echo json_encode([class_exists("CheckoutGuard\\\\Http\\\\RateLimitedClient"), class_exists("CheckoutGuard\\\\Testing\\\\CallBudget"),'
                . ' array_values(array_filter(get_included_files(), fn($f) => str_contains($f, "stubs")))]);';
            $cmd = 'php -d extension=' . escapeshellarg((string) getenv('CHECKOUT_GUARD_EXT')) . ' -r ' . escapeshellarg($script) . ' ' . escapeshellarg($copy) . ' 2>&1';
            exec($cmd, $lines, $rc);
            $this->assertSame(0, $rc, implode("\n", $lines));
            $this->assertSame([true, true, []], json_decode((string) end($lines), true), implode("\n", $lines));
        } finally {
            exec('rm -rf ' . escapeshellarg($copy));
        }
    }
}
