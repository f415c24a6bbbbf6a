<?php

// Stubs for checkout_guard's exception classes. They are registered by hand (they extend
// SPL classes), so `cargo php stubs` cannot see them; scripts/stubs.sh --check verifies
// that the extension declares exactly these classes with these parents.

namespace CheckoutGuard {
    /**
     * Bad options or arguments; the message names the option (or argument) and the value.
     */
    class ConfigurationException extends \InvalidArgumentException {}

    /**
     * Valkey could not be reached and on_unavailable is "throw", or an administrative call
     * (markHot, unmarkHot, isHot, reset) could not reach Valkey. Never carries a password.
     */
    class UnavailableException extends \RuntimeException {}
}
