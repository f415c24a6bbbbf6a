<?php
// Loads checkout-guard's PHP library (namespaces CheckoutGuard\Http, CheckoutGuard\Testing)
// without Composer, and the PSR interfaces it implements from Debian's packages
// (php-psr-http-client, php-psr-http-message) when they are installed there.
// With Composer, use php/composer.json's autoload instead (the library package).
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    $prefix = 'CheckoutGuard\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});

foreach (['/usr/share/php/Psr/Http/Message/autoload.php', '/usr/share/php/Psr/Http/Client/autoload.php'] as $debian) {
    if (is_file($debian)) {
        require_once $debian;
    }
}
