<?php
// PHPUnit bootstrap: the tests run against the built extension. The integration and system
// suites also need a real Valkey that scripts/test.sh started (CHECKOUT_GUARD_TEST_URL;
// failure tests start their own) and, for system, its php-fpm + nginx; the unit suite
// needs neither (phpunit.xml).
declare(strict_types=1);

if (!extension_loaded('checkout_guard')) {
    fwrite(STDERR, "checkout_guard is not loaded: run via scripts/test.sh (php -d extension=...)\n");
    exit(2);
}
if (!extension_loaded('redis')) {
    fwrite(STDERR, "phpredis is not loaded: run scripts/setup.sh\n");
    exit(2);
}
// The suites asked for (--testsuite NAME[,NAME], either spelling); none named: all three.
// Only the unit suite needs no Valkey and no stack: it runs with the extension alone.
$suites = [];
$args = $_SERVER['argv'] ?? [];
foreach ($args as $i => $arg) {
    if ($arg === '--testsuite' && isset($args[$i + 1])) {
        array_push($suites, ...explode(',', $args[$i + 1]));
    } elseif (str_starts_with($arg, '--testsuite=')) {
        array_push($suites, ...explode(',', substr($arg, strlen('--testsuite='))));
    }
}
$unitOnly = $suites !== [] && array_diff(array_map('trim', $suites), ['unit']) === [];
if (!$unitOnly) {
    foreach (['CHECKOUT_GUARD_TEST_URL', 'CHECKOUT_GUARD_EXT', 'VALKEY_SERVER', 'CHECKOUT_GUARD_TEST_EVENTS'] as $var) {
        if (getenv($var) === false) {
            fwrite(STDERR, "$var is not set: run via scripts/test.sh (only --testsuite unit runs without it)\n");
            exit(2);
        }
    }
}
if (getenv('CHECKOUT_GUARD_EXT') === false) {
    // A unit run started by hand: child PHP processes load the extension this one loaded.
    foreach (@file('/proc/self/maps') ?: [] as $line) {
        if (preg_match('#\s(/\S*checkout_guard\S*\.so)$#', rtrim($line), $m)) {
            putenv('CHECKOUT_GUARD_EXT=' . $m[1]);
            break;
        }
    }
    if (getenv('CHECKOUT_GUARD_EXT') === false) {
        fwrite(STDERR, "CHECKOUT_GUARD_EXT is not set and the loaded extension's file was not found\n");
        exit(2);
    }
}
require __DIR__ . '/../../php/autoload.php';
require '/usr/share/php/GuzzleHttp/autoload.php';
require '/usr/share/php/Nyholm/Psr7/autoload.php';
require __DIR__ . '/../../php/examples/zone_a_checkout.php';
require __DIR__ . '/support/NewRelicStandIn.php';
require __DIR__ . '/support/ValkeyProcess.php';
require __DIR__ . '/support/LatencyProxy.php';
require __DIR__ . '/support/FaultProxy.php';
require __DIR__ . '/support/ValkeyCluster.php';
require __DIR__ . '/support/TlsServer.php';
require __DIR__ . '/support/ManagedServer.php';
require __DIR__ . '/support/SentinelGroup.php';
require __DIR__ . '/support/Cli.php';
require __DIR__ . '/support/HttpGet.php';
require __DIR__ . '/support/ProjectScript.php';
require __DIR__ . '/support/EventLog.php';
require __DIR__ . '/support/Exposition.php';
require __DIR__ . '/support/StandInProvider.php';
require __DIR__ . '/support/LeaseHolder.php';
require __DIR__ . '/support/StrictCalls.php';
require __DIR__ . '/support/LimiterTestCase.php';
require __DIR__ . '/support/OwnValkeyTestCase.php';
require __DIR__ . '/support/ModuleValkeyTestCase.php';
require __DIR__ . '/support/OwnFpmTestCase.php';
require __DIR__ . '/support/DecisionTestCase.php';
require __DIR__ . '/support/InFlightTestCase.php';
require __DIR__ . '/support/HostileCallsTestCase.php';
