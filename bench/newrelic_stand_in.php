<?php
// Stands in for the New Relic agent in the flush benchmark: takes the event as the agent's
// newrelic_record_custom_event() would (the agent copies it into its own buffer).
function newrelic_record_custom_event(string $name, array $attributes): void
{
    $GLOBALS['__nr'][] = $attributes;
    if (count($GLOBALS['__nr']) >= 1000) {
        $GLOBALS['__nr'] = [];
    }
}
