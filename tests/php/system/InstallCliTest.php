<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * scripts/install-cli.sh (docs/install.md, "The command line"): after `cargo build
 * --release`, `checkout-guard` on the PATH is the checkout's build, through a link in a
 * bin directory (here a temporary one, never /usr/local/bin or ~/.local/bin).
 */
final class InstallCliTest extends TestCase
{
    private string $dir;

    protected function setUp(): void
    {
        // A directory of its own per test, and PHP's realpath cache cleared: a path it
        // cached through an earlier test's link would send a write to the link's target
        // (the real build).
        clearstatcache(true);
        $this->dir = sys_get_temp_dir() . '/cg-install-cli-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir . '/bin', 0755, true);
    }

    protected function tearDown(): void
    {
        exec('rm -rf ' . escapeshellarg($this->dir));
    }

    /** The build scripts/test.sh made: $CARGO_TARGET_DIR/release, else target/release. */
    private static function build(): string
    {
        $target = getenv('CARGO_TARGET_DIR') ?: ProjectScript::root() . '/target';
        return $target . '/release/checkout-guard';
    }

    /** @return array{0: int, 1: string} */
    private function sh(string $command, array $env = []): array
    {
        $prefix = 'env';
        foreach ($env as $k => $v) {
            $prefix .= ' ' . escapeshellarg("$k=$v");
        }
        exec("$prefix $command 2>&1", $lines, $rc);
        return [$rc, implode("\n", $lines)];
    }

    private function script(): string
    {
        return 'bash ' . escapeshellarg(ProjectScript::root() . '/scripts/install-cli.sh') . ' ' . escapeshellarg($this->dir . '/bin');
    }

    public function testTheBuildIsOnThePathThroughALink(): void
    {
        $this->assertFileExists(self::build(), 'cargo build --release builds the CLI');
        $path = $this->dir . '/bin:/usr/bin:/bin';
        [$rc, $out] = $this->sh($this->script(), ['PATH' => $path]);
        $this->assertSame(0, $rc, $out);
        $link = $this->dir . '/bin/checkout-guard';
        $this->assertTrue(is_link($link), $out);
        $this->assertSame(self::build(), readlink($link), $out);
        $this->assertStringNotContainsString('not on the PATH', $out);

        [$rc, $found] = $this->sh('sh -c "command -v checkout-guard"', ['PATH' => $path]);
        $this->assertSame([0, $link], [$rc, $found]);
        [$rc, $version] = $this->sh('checkout-guard --version', ['PATH' => $path]);
        $this->assertSame(0, $rc, $version);
        $this->assertMatchesRegularExpression('/^checkout-guard \d+\.\d+\.\d+/', $version);

        // Again: the same link, no error.
        [$rc, $out] = $this->sh($this->script(), ['PATH' => $path]);
        $this->assertSame(0, $rc, $out);
        $this->assertSame(self::build(), readlink($link));
    }

    public function testSaysSoWhenTheBinDirectoryIsNotOnThePath(): void
    {
        [$rc, $out] = $this->sh($this->script(), ['PATH' => '/usr/bin:/bin']);
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString($this->dir . '/bin is not on the PATH', $out);
    }

    public function testLeavesAFileThatIsNotALinkAlone(): void
    {
        $file = $this->dir . '/bin/checkout-guard';
        $this->assertFalse(is_link($file) || file_exists($file));
        file_put_contents($file, "#!/bin/sh\necho mine\n");
        [$rc, $out] = $this->sh($this->script());
        $this->assertSame(1, $rc, $out);
        $this->assertStringContainsString('is not a link (left alone)', $out);
        $this->assertSame("#!/bin/sh\necho mine\n", file_get_contents($this->dir . '/bin/checkout-guard'));
    }

    public function testWithoutABuildItNamesTheCommandThatMakesIt(): void
    {
        [$rc, $out] = $this->sh($this->script(), ['CARGO_TARGET_DIR' => $this->dir . '/empty-target']);
        $this->assertSame(1, $rc, $out);
        $this->assertStringContainsString('run cargo build --release first', $out);
        $this->assertFileDoesNotExist($this->dir . '/bin/checkout-guard');
    }
}
