<?php
declare(strict_types=1);

namespace CheckoutGuard\Symfony;

use CheckoutGuard\Symfony\DependencyInjection\CheckoutGuardExtension;
use Symfony\Component\DependencyInjection\Extension\ExtensionInterface;
use Symfony\Component\HttpKernel\Bundle\Bundle;

/**
 * The Symfony bundle (tested with Debian 12's Symfony 5.4): limiters from
 * `config/packages/checkout_guard.yaml` as services `checkout_guard.limiter.<name>`,
 * autowired as `CheckoutGuard\Limiter $<name>Limiter`, and an optional decorator of an
 * HTTP client (GuardedHttpClient). docs/symfony.md has the configuration.
 *
 * Nothing loads this class unless a kernel registers the bundle: the library's other
 * classes need no Symfony.
 */
final class CheckoutGuardBundle extends Bundle
{
    public function getContainerExtension(): ?ExtensionInterface
    {
        return $this->extension ??= new CheckoutGuardExtension();
    }

    public function getPath(): string
    {
        return __DIR__;
    }
}
