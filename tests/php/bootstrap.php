<?php
// PHPUnit bootstrap: the tests run against the built extension and a real Valkey that
// scripts/test.sh started (CHECKOUT_GUARD_TEST_URL); failure tests start their own.
declare(strict_types=1);

if (!extension_loaded('checkout_guard')) {
    fwrite(STDERR, "checkout_guard is not loaded: run via scripts/test.sh (php -d extension=...)\n");
    exit(2);
}
if (!extension_loaded('redis')) {
    fwrite(STDERR, "phpredis is not loaded: run scripts/setup.sh\n");
    exit(2);
}
foreach (['CHECKOUT_GUARD_TEST_URL', 'CHECKOUT_GUARD_EXT', 'VALKEY_SERVER', 'CHECKOUT_GUARD_TEST_EVENTS'] as $var) {
    if (getenv($var) === false) {
        fwrite(STDERR, "$var is not set: run via scripts/test.sh\n");
        exit(2);
    }
}
require __DIR__ . '/../../php/autoload.php';
require '/usr/share/php/GuzzleHttp/autoload.php';
require '/usr/share/php/Nyholm/Psr7/autoload.php';
require __DIR__ . '/../../php/examples/zone_a_checkout.php';
require __DIR__ . '/support/NewRelicStandIn.php';
require __DIR__ . '/support/ValkeyProcess.php';
require __DIR__ . '/support/ValkeyCluster.php';
require __DIR__ . '/support/Cli.php';
require __DIR__ . '/support/ProjectScript.php';
require __DIR__ . '/support/EventLog.php';
require __DIR__ . '/support/LimiterTestCase.php';
require __DIR__ . '/support/OwnValkeyTestCase.php';
