<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Tests that run a php-fpm of their own (the PHP's own php-fpm binary, its pool written by
 * the test into $dir) and talk FastCGI to it with cgi-fcgi: skipped, saying why, where
 * either is missing; php-fpm stopped and its files and local-denial tables removed after
 * each test. A Valkey of the test's own, as OwnValkeyTestCase.
 */
abstract class OwnFpmTestCase extends OwnValkeyTestCase
{
    protected string $dir = '';
    /** @var resource|null the php-fpm master */
    protected $fpm = null;
    /** The pool's FastCGI port. */
    protected int $port = 0;

    /** The prefix of $dir under the temporary directory (cg-NAME-). */
    abstract protected static function dirPrefix(): string;

    protected function setUp(): void
    {
        if (self::fpmBinary() === null) {
            $this->markTestSkipped('no php-fpm for PHP ' . PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION . ' on this machine');
        }
        if (trim((string) shell_exec('command -v cgi-fcgi')) === '') {
            $this->markTestSkipped('cgi-fcgi (Debian: libfcgi-bin) is not installed: it sends the FastCGI requests');
        }
        parent::setUp();
        $this->dir = sys_get_temp_dir() . '/' . static::dirPrefix() . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        $master = $this->stopFpm();
        if ($master > 0) {
            foreach (glob("/dev/shm/checkout-guard-denials.*.P$master.*") ?: [] as $f) {
                @unlink($f);
            }
        }
        if ($this->dir !== '') {
            foreach (glob("{$this->dir}/*") ?: [] as $f) {
                @unlink($f);
            }
            @rmdir($this->dir);
        }
        parent::tearDown();
    }

    /** This PHP's php-fpm, or null. */
    protected static function fpmBinary(): ?string
    {
        foreach (['/usr/sbin/php-fpm' . PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION, '/usr/sbin/php-fpm'] as $f) {
            if (is_executable($f)) {
                return $f;
            }
        }
        return null;
    }

    /** Stops php-fpm (SIGTERM, waited for up to 5 s, then SIGKILL); its master's pid, 0 if none ran. */
    protected function stopFpm(): int
    {
        if ($this->fpm === null) {
            return 0;
        }
        $pid = proc_get_status($this->fpm)['pid'];
        proc_terminate($this->fpm, SIGTERM);
        for ($i = 0; $i < 250 && proc_get_status($this->fpm)['running']; $i++) {
            usleep(20_000);
        }
        if (proc_get_status($this->fpm)['running']) {
            proc_terminate($this->fpm, SIGKILL);
        }
        proc_close($this->fpm);
        $this->fpm = null;
        return $pid;
    }
}
