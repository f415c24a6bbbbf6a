<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests\Integration;

use CheckoutGuard\Tests\Cli;
use CheckoutGuard\Tests\HttpGet;
use CheckoutGuard\Tests\LimiterTestCase;
use CheckoutGuard\Tests\ValkeyProcess;

/**
 * Every example in README.md and docs/*.md runs as printed.
 *
 * - A ```php block is a file of its own (it must begin with `<?php` and `require` what it
 *   uses: nothing is prepended), run by a PHP CLI with the extension loaded (`-d
 *   extension=`) from the repository's root (a PHPUnit test case, `final class X extends
 *   TestCase`, by this run's PHPUnit as X.php), against a fresh Valkey of the test's own. The
 *   blocks rely on the INI default `checkout_guard.url = redis://127.0.0.1:6379`: the test
 *   sets that one setting to its Valkey's URL (rather than taking port 6379, which may be
 *   busy). It passes when it exits 0 and writes nothing to stderr (notices and warnings
 *   included). One more rewrite: the library's install path, `/usr/share/php/CheckoutGuard/
 *   autoload.php` (the Debian package's), names this tree's `php/autoload.php`, so the tree
 *   is what runs. What a block says it prints is checked: a `// prints: TEXT` line in it is
 *   its whole output; a ```text block next after it, with "prints" in the prose between, is.
 * - A shell block (```sh) is checked command by command: a `checkout-guard` command's
 *   subcommand answers `--help`, and that help names every `--flag` the command uses (the
 *   commands read files the docs only name). Other commands are the long runs, builds and
 *   installs of SKIPPED_COMMANDS, each tested where the reason says (the scripts they name
 *   must exist); any other command fails the test until it is checked here or listed there
 *   with a reason.
 * - A block preceded, on the line before its fence, by `<!-- fragment: REASON -->` is
 *   skipped; the reason must not be empty.
 *
 * A failure names the block as file:line (its opening fence) and what it printed.
 */
final class DocExamplesTest extends LimiterTestCase
{
    /** The longest a block may run (the quick start takes about 0.1 s). */
    private const TIMEOUT_SECONDS = 30.0;

    /** Shell commands not run here, by prefix, with the reason (and where they are tested). */
    private const SKIPPED_COMMANDS = [
        'scripts/' => 'a run script (minutes; each has a short run in its own test: docs/architecture.md, or is the test command)',
        'cargo ' => 'a build (scripts/test.sh builds)',
        'phpize' => 'an install path (scripts/install-test.sh)',
        './configure' => 'an install path (scripts/install-test.sh)',
        'make' => 'an install path (scripts/install-test.sh)',
        'sudo ' => 'needs root (install paths: scripts/install-test.sh)',
        'pie ' => 'PIE, not installed here (its steps: scripts/install-test.sh)',
        'cd checkout-guard && pie ' => 'PIE, not installed here (its steps: scripts/install-test.sh)',
        'docker ' => 'no Docker here (the Dockerfile\'s steps: scripts/install-test.sh)',
        '.venv/bin/python bench/' => 'a benchmark (minutes)',
        '.venv/bin/python loadtest/event_api_standin.py' => 'a server that runs until stopped (tested: loadtest/tests/test_standins.py, crates/cli/tests/ship.rs)',
        '.venv/bin/python loadtest/otlp_receiver.py' => 'a server that runs until stopped (tested: loadtest/tests/test_standins.py, crates/cli/tests/ship.rs)',
        'export NEW_RELIC_' => 'a secret the reader sets (ship reads it: crates/cli/tests/ship.rs)',
        'php -d extension=target/release/libcheckout_guard.so bench/' => 'a benchmark (minutes)',
        '$VALKEY ' => 'starts a Valkey on port 6379 (the suites start their own)',
        'php -d extension=target/release/libcheckout_guard.so -r ' => 'needs a Valkey on port 6379 (the suites start their own; the README\'s quick start is this, run here)',
    ];

    private const INSTALLED_LIBRARY = '/usr/share/php/CheckoutGuard/autoload.php';

    private ?ValkeyProcess $valkey = null;

    protected function tearDown(): void
    {
        $this->valkey?->stop();
    }

    private static function root(): string
    {
        return dirname(__DIR__, 3);
    }

    /**
     * Every fenced block of README.md and docs/*.md.
     *
     * @return array<string, array{string, int, string, string, ?string, ?string}> by
     *         file:line: file, line, language, code, fragment reason (null: not marked),
     *         what the prose says it prints (null: nothing)
     */
    public static function blocks(): array
    {
        $files = ['README.md', ...array_map(
            static fn (string $f) => 'docs/' . basename($f),
            glob(self::root() . '/docs/*.md') ?: [],
        )];
        $blocks = [];
        foreach ($files as $file) {
            $lines = file(self::root() . '/' . $file, FILE_IGNORE_NEW_LINES);
            self::assertIsArray($lines, $file);
            $open = null;
            $between = null;   // the prose since the last php block, while looking for its output
            foreach ($lines as $i => $line) {
                if ($open === null && preg_match('/^```(\w*)\s*$/', $line, $m)) {
                    $open = ['line' => $i + 1, 'lang' => $m[1], 'code' => [], 'before' => $lines[$i - 1] ?? ''];
                    continue;
                }
                if ($open === null) {
                    if ($between !== null) {
                        $between[1] .= $line . "\n";
                    }
                    continue;
                }
                if (!str_starts_with($line, '```')) {
                    $open['code'][] = $line;
                    continue;
                }
                $code = implode("\n", $open['code']) . "\n";
                if ($between !== null && $open['lang'] === 'text' && str_contains($between[1], 'prints')) {
                    $blocks[$between[0]][5] = $code;
                }
                $between = null;
                $fragment = null;
                if (preg_match('/^<!--\s*fragment:(.*)-->\s*$/', $open['before'], $f)) {
                    $fragment = trim($f[1]);
                }
                $key = "$file:{$open['line']}";
                $blocks[$key] = [$file, $open['line'], $open['lang'], $code, $fragment, null];
                if ($open['lang'] === 'php') {
                    $between = [$key, ''];
                }
                $open = null;
            }
        }
        return $blocks;
    }

    /** @return array<string, array{string, int, string, string, ?string, ?string}> */
    public static function phpBlocks(): array
    {
        return array_filter(self::blocks(), static fn (array $b) => $b[2] === 'php');
    }

    /** @return array<string, array{string, int, string, string, ?string, ?string}> */
    public static function shellBlocks(): array
    {
        return array_filter(self::blocks(), static fn (array $b) => in_array($b[2], ['sh', 'bash', 'shell', 'console'], true));
    }

    public function testTheReadmesFirstPhpBlockIsTheQuickStartAndSaysWhatItPrints(): void
    {
        $readme = array_values(array_filter(self::phpBlocks(), static fn (array $b) => $b[0] === 'README.md'));
        self::assertNotEmpty($readme, 'README.md has a php block');
        [$file, $line, , $code, $fragment, $prints] = $readme[0];
        self::assertNull($fragment, "$file:$line: the README's first php block is the quick start, runnable as printed");
        self::assertNotNull($prints, "$file:$line: a ```text block after it shows what it prints");
        $quickStart = strpos((string) file_get_contents(self::root() . '/README.md'), "\n## Quick start\n");
        self::assertNotFalse($quickStart, 'README.md has a Quick start section');
    }

    /**
     * The quick start's web path (what php-fpm would serve), under PHP's built-in server: every
     * shop id the client gives reaches the limiter (`0` too: a falsy id is an id), and one the
     * limiter would refuse (blank, too long) is a 400, never a charge sent unlimited or a 500.
     * Its limiter is named for it alone: no other example shares its buckets with other limits.
     */
    public function testTheQuickStartServedOverHttpLimitsEveryShopAndRefusesABadOne(): void
    {
        $readme = array_values(array_filter(self::phpBlocks(), static fn (array $b) => $b[0] === 'README.md'));
        [, $line, , $code] = $readme[0];
        $where = "README.md:$line";

        $this->valkey = new ValkeyProcess();
        $this->valkey->start();
        $dir = sys_get_temp_dir() . '/cg-doc-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($dir);
        $script = "$dir/checkout.php";
        file_put_contents($script, str_replace(self::INSTALLED_LIBRARY, self::root() . '/php/autoload.php', $code));
        $server = proc_open([
            PHP_BINARY,
            '-d', 'include_path=' . get_include_path(),
            ...self::extensionFlags(),
            '-d', 'checkout_guard.url=' . $this->valkey->url(),
            '-S', '127.0.0.1:0',
            $script,
        ], [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['pipe', 'w']], $pipes, self::root());
        self::assertIsResource($server);
        try {
            // The server says its port on stderr once it listens.
            $said = '';
            $deadline = hrtime(true) + (int) (self::TIMEOUT_SECONDS * 1e9);
            while (!preg_match('~Development Server \(http://127\.0\.0\.1:(\d+)\) started~', $said, $port)) {
                $left = ($deadline - hrtime(true)) / 1e9;
                self::assertGreaterThan(0, $left, "php -S did not start: $said");
                $read = [$pipes[2]];
                $w = $e = null;
                if (stream_select($read, $w, $e, (int) $left, (int) (fmod($left, 1.0) * 1e6)) > 0) {
                    $chunk = (string) fread($pipes[2], 8192);
                    self::assertFalse($chunk === '' && feof($pipes[2]), "php -S ended: $said");
                    $said .= $chunk;
                }
            }
            $get = static function (string $query) use ($port): array {
                [$body, $headers] = HttpGet::fetch("http://127.0.0.1:{$port[1]}/checkout?$query");
                self::assertNotFalse($body, "/checkout?$query: no answer");
                return [(int) explode(' ', $headers[0] ?? '')[1], $body];
            };

            // Bursts of 2 for all shops: shop "0" is a shop, limited as any other.
            self::assertSame([200, 'paid'], $get('shop=0'));
            self::assertSame([200, 'paid'], $get('shop=0'));
            [$status, $body] = $get('shop=0');
            self::assertSame(503, $status, "$where: the third payment of a burst of 2 (shop \"0\") is refused: $body");

            foreach (['shop=' => 'empty', 'shop=%20' => 'blank', 'shop=' . str_repeat('x', 129) => '129 bytes', 'shop=a%01b' => 'a control byte', 'shop=a%0A' => 'a newline', 'shop[]=a' => 'an array'] as $query => $case) {
                [$status, $body] = $get($query);
                self::assertSame([400, 'bad shop id'], [$status, $body], "$where: a shop id the limiter refuses ($case) is the client's mistake");
            }
        } finally {
            proc_terminate($server);
            fclose($pipes[2]);
            proc_close($server);
            @unlink($script);
            @rmdir($dir);
        }

        self::assertSame(1, preg_match("/new RateLimiter\\(\\['name' => '([^']+)'/", $code, $m), "$where: the quick start names its limiter");
        foreach (self::phpBlocks() as $key => [, , , $other]) {
            if ($key !== $where) {
                self::assertStringNotContainsString("'name' => '{$m[1]}'", $other, "$key names its limiter as the quick start does ($where), with limits of its own");
            }
        }
    }

    /**
     * @dataProvider phpBlocks
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('phpBlocks')]
    public function testPhpBlockRunsAsPrinted(string $file, int $line, string $lang, string $code, ?string $fragment, ?string $prints): void
    {
        $where = "$file:$line";
        if ($fragment !== null) {
            self::assertNotSame('', $fragment, "$where: a fragment marker needs a reason: <!-- fragment: WHY -->");
            self::markTestSkipped("$where: fragment: $fragment");
        }
        self::assertStringStartsWith('<?php', $code, "$where: a php block is a whole file: it begins with <?php (or is marked <!-- fragment: WHY -->)");
        // A Symfony or Laravel example needs Debian's framework packages (scripts/setup.sh
        // installs them; the PHP matrix's chroots have none, as SymfonyBundleTest and
        // LaravelIntegrationTest skip there): skipped where the framework's autoloader is missing.
        if (preg_match_all("~require '(/usr/share/php/(?:Symfony|Illuminate)/[^']+)'~", $code, $frameworks)) {
            foreach ($frameworks[1] as $path) {
                if (!is_file($path)) {
                    self::markTestSkipped("$where: needs $path (Debian's framework package, which scripts/setup.sh installs)");
                }
            }
        }
        $this->valkey = new ValkeyProcess();
        $this->valkey->start();

        $dir = sys_get_temp_dir() . '/cg-doc-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($dir);
        // A PHPUnit test file runs under PHPUnit (this run's), named for its class as PHPUnit 9 wants.
        $testCase = preg_match('/^final class (\w+) extends TestCase\b/m', $code, $c) ? $c[1] : null;
        $script = $dir . '/' . ($testCase ?? 'example') . '.php';
        file_put_contents($script, str_replace(self::INSTALLED_LIBRARY, self::root() . '/php/autoload.php', $code));
        $phpunit = is_file($_SERVER['argv'][0] ?? '') ? realpath($_SERVER['argv'][0]) : '/usr/bin/phpunit';
        try {
            [$status, $out, $err] = self::runCommand([
                PHP_BINARY,
                '-d', 'include_path=' . get_include_path(),
                ...self::extensionFlags(),
                '-d', 'checkout_guard.url=' . $this->valkey->url(),
                '-d', 'error_reporting=-1',
                '-d', 'display_errors=stderr',
                '-d', 'log_errors=0',
                ...($testCase === null ? [] : [$phpunit, '--no-configuration', '--do-not-cache-result']),
                $script,
            ]);
        } finally {
            @unlink($script);
            @rmdir($dir);
        }
        $shown = "$where printed:\n$out" . ($err === '' ? '' : "\nstderr:\n$err");
        self::assertSame(0, $status, "$where exited $status. $shown");
        self::assertSame('', $err, "$where wrote to stderr. $shown");
        if ($prints !== null) {
            self::assertSame($prints, $out, "$where: the ```text block after it is what it prints. $shown");
        }
        if (preg_match_all('~^\s*// prints: (.*)$~m', $code, $m)) {
            self::assertCount(1, $m[1], "$where: one `// prints:` line");
            self::assertSame($m[1][0] . "\n", $out, "$where: its `// prints:` line is what it prints. $shown");
        }
    }

    /**
     * @dataProvider shellBlocks
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('shellBlocks')]
    public function testShellBlockCommandsAreOurs(string $file, int $line, string $lang, string $code, ?string $fragment, ?string $prints): void
    {
        $where = "$file:$line";
        if ($fragment !== null) {
            self::assertNotSame('', $fragment, "$where: a fragment marker needs a reason: <!-- fragment: WHY -->");
            self::markTestSkipped("$where: fragment: $fragment");
        }
        $checked = 0;
        $skipped = [];
        foreach (self::commands($code) as $command) {
            $bare = preg_replace('/^(\w+=(\'[^\']*\'|"[^"]*"|\$\([^)]*\)|\S*)(\s+|$))+/', '', $command);
            if ($bare === '') {
                continue;   // assignments only (VALKEY=$(...))
            }
            if (str_starts_with($bare, 'checkout-guard ')) {
                $this->assertFlagsExist($where, $bare);
                $checked++;
                continue;
            }
            $reason = null;
            foreach (self::SKIPPED_COMMANDS as $prefix => $why) {
                if (str_starts_with($bare, $prefix) || $bare === rtrim($prefix)) {
                    $reason = $why;
                    break;
                }
            }
            self::assertNotNull($reason, "$where: `$command` is neither run by this test nor in its SKIPPED_COMMANDS "
                . '(add it there with a reason, or mark the block <!-- fragment: WHY -->)');
            // Not run, but the project's files it names are there (a renamed script fails here).
            preg_match_all('~(?<=^|\s)((?:scripts|bench|loadtest|tests)/[\w./-]+\.(?:sh|py|php))(?=\s|$)~', $bare, $paths);
            foreach ($paths[1] as $path) {
                self::assertFileExists(self::root() . "/$path", "$where: `$command` names $path");
            }
            $skipped[] = "`$bare`: $reason";
        }
        if ($checked === 0) {
            self::markTestSkipped("$where: " . implode('; ', $skipped));
        }
    }

    /**
     * The commands of a shell block: continuation lines and quotes spanning lines joined,
     * comments and blank lines dropped.
     *
     * @return list<string>
     */
    private static function commands(string $code): array
    {
        $commands = [];
        $current = '';
        $quote = null;
        foreach (explode("\n", $code) as $line) {
            [$line, $quote] = self::withoutComment($line, $quote);
            if ($quote !== null) {
                $current .= $line . ' ';
                continue;
            }
            if (str_ends_with(rtrim($line), '\\')) {
                $current .= substr(rtrim($line), 0, -1) . ' ';
                continue;
            }
            $current = trim(preg_replace('/\s+/', ' ', $current . $line));
            if ($current !== '') {
                $commands[] = $current;
            }
            $current = '';
        }
        return $commands;
    }

    /**
     * A shell line without its `#` comment (a `#` at its start or after a space, outside
     * quotes), and the quote still open at its end (null: none), given the one open at its start.
     *
     * @return array{string, ?string}
     */
    private static function withoutComment(string $line, ?string $quote): array
    {
        for ($i = 0, $n = strlen($line); $i < $n; $i++) {
            $c = $line[$i];
            if ($quote !== null) {
                $quote = $c === $quote ? null : $quote;
            } elseif ($c === "'" || $c === '"') {
                $quote = $c;
            } elseif ($c === '#' && ($i === 0 || $line[$i - 1] === ' ')) {
                return [substr($line, 0, $i), null];
            }
        }
        return [$line, $quote];
    }

    /** The subcommand of `checkout-guard ...` answers --help, naming every flag used. */
    private function assertFlagsExist(string $where, string $command): void
    {
        $words = preg_split('/\s+/', substr($command, strlen('checkout-guard ')));
        $sub = [];
        foreach (array_slice($words, 0, 2) as $w) {
            if (!preg_match('/^[a-z]+(-[a-z]+)*$/', $w)) {
                break;
            }
            $sub[] = $w;
        }
        // The longest leading words that are a subcommand (`limiter status`, `scan`).
        $help = null;
        for ($n = count($sub); $n >= 1 && $help === null; $n--) {
            [$status, $out] = Cli::run(...array_slice($sub, 0, $n), ...['--help']);
            if ($status === 0 && str_contains($out, 'Usage: checkout-guard') && !str_contains($out, 'Usage: checkout-guard <COMMAND>')) {
                $help = $out;
            }
        }
        self::assertNotNull($help, "$where: `$command`: `checkout-guard " . implode(' ', $sub) . ' --help` fails: not a subcommand');
        preg_match_all('/(?<=^|\s)(--[a-z][a-z0-9-]*)/', $command, $m);
        foreach (array_unique($m[1]) as $flag) {
            self::assertMatchesRegularExpression(
                '/(?<![\w-])' . preg_quote($flag, '/') . '(?![\w-])/',
                $help,
                "$where: `$command` uses $flag, which `checkout-guard " . implode(' ', $sub) . " --help` does not name:\n$help"
            );
        }
    }

    /**
     * Runs $cmd from the repository's root, TIMEOUT_SECONDS at most (then killed).
     *
     * @param list<string> $cmd
     * @return array{int, string, string} exit status, stdout, stderr
     */
    private static function runCommand(array $cmd): array
    {
        $p = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, self::root());
        self::assertIsResource($p);
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);
        $out = $err = '';
        $deadline = hrtime(true) + (int) (self::TIMEOUT_SECONDS * 1e9);
        $open = [1 => $pipes[1], 2 => $pipes[2]];
        while ($open !== []) {
            $left = ($deadline - hrtime(true)) / 1e9;
            if ($left <= 0) {
                proc_terminate($p, 9);
                self::fail('timed out after ' . self::TIMEOUT_SECONDS . " s: $out\n$err");
            }
            $read = array_values($open);
            $w = $e = null;
            if (stream_select($read, $w, $e, (int) $left, (int) (fmod($left, 1.0) * 1e6)) === false) {
                break;
            }
            foreach ($read as $r) {
                $chunk = (string) fread($r, 65536);
                $fd = array_search($r, $open, true);
                if ($fd === 1) {
                    $out .= $chunk;
                } else {
                    $err .= $chunk;
                }
                if (feof($r)) {
                    fclose($r);
                    unset($open[$fd]);
                }
            }
        }
        return [proc_close($p), $out, $err];
    }
}
