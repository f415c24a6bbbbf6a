<?php
// A stand-in for the New Relic PHP agent's newrelic_record_custom_event(): the newrelic
// sink calls it exactly as it would call the agent, and tests read what it was given.
declare(strict_types=1);

if (!function_exists('newrelic_record_custom_event')) {
    function newrelic_record_custom_event(string $name, array $attributes): void
    {
        $GLOBALS['__newrelic_events'][] = [$name, $attributes];
    }
}
