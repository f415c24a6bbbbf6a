<?php
declare(strict_types=1);

namespace CheckoutGuard\Health;

use CheckoutGuard\RateLimiter;

/**
 * The readiness check of a checkout instance: can it serve a checkout now?
 *
 *  - limiter: the RateLimiter's circuit is closed (after a failure to reach Valkey its
 *    decisions fall to on_unavailable for retry_interval_ms: the instance is degraded);
 *  - valkey:  one PING over the extension's pooled connection answers (no new connection
 *    per check; nothing is sent while the circuit is open);
 *  - decisions: this worker's decisions can be made (a Valkey that answers PING may still
 *    refuse every decision: at maxmemory, engine module without the module). Not ready
 *    when the last 3 decisions failed; when none succeeded in the last 10 s (an idle or
 *    a new worker), or after those 3 failures, one peek() on PROBE_SHOP decides (takes
 *    nothing): ready if it was made. One failure among successes never fails it.
 *  - fpm:     php-fpm has a free worker besides the one answering, and nothing waits in its
 *    listen queue (skipped outside php-fpm).
 *
 * Served through the application on purpose, behind the same flow control as checkouts:
 * a saturated instance is taken out of rotation, which is what readiness is for. It is
 * not a liveness check: liveness is a TCP connect to the serving port (see deploy/k8s).
 *
 *   (new Readiness($limiter))->respond();   // 200 or 503, JSON body naming what failed
 */
final class Readiness
{
    /** The shop ID of the peek() that probes whether a decision can be made. */
    public const PROBE_SHOP = 'checkout-guard-readiness-probe';

    /** Without a decision made within this time, the check makes one (a peek). */
    public const DECISION_WINDOW_SECONDS = 10.0;

    /**
     * @param RateLimiter|null $limiter   null: the instance runs without a limiter
     * @param int              $minIdleWorkers free php-fpm workers required besides this one
     * @param int              $maxListenQueue connections allowed to wait for a worker
     */
    public function __construct(
        private readonly ?RateLimiter $limiter,
        private readonly int $minIdleWorkers = 1,
        private readonly int $maxListenQueue = 0,
    ) {
        if ($minIdleWorkers < 0) {
            throw new \InvalidArgumentException("minIdleWorkers must be 0 or more, got $minIdleWorkers");
        }
        if ($maxListenQueue < 0) {
            throw new \InvalidArgumentException("maxListenQueue must be 0 or more, got $maxListenQueue");
        }
    }

    /**
     * @return array{ready: bool, failed: list<string>, checks: array<string, array<string, mixed>>}
     */
    public function check(): array
    {
        $checks = [];
        if ($this->limiter !== null) {
            $state = $this->limiter->health(false);
            $checks['limiter'] = [
                'ok' => $state['circuit'] === 'closed',
                'circuit' => $state['circuit'],
                'retry_in_ms' => $state['retry_in_ms'],
                'consecutive_failures' => $state['consecutive_failures'],
                'last_error' => $state['last_error'],
            ];
            if ($checks['limiter']['ok']) {
                $ping = $this->limiter->health(true);
                $checks['valkey'] = [
                    'ok' => $ping['ok'],
                    'url' => $ping['url'],
                    'ping_ms' => $ping['ok'] ? round((float) $ping['ping_ms'], 3) : null,
                    'error' => $ping['ok'] ? null : $ping['last_error'],
                ];
            } else {
                $checks['valkey'] = ['ok' => false, 'url' => $state['url'], 'error' => 'not pinged: circuit open'];
            }
            $checks['decisions'] = $this->decisions($checks['valkey']['ok']);
        }
        $checks['fpm'] = $this->fpm();
        $failed = array_keys(array_filter($checks, static fn (array $c) => !$c['ok']));
        return ['ready' => $failed === [], 'failed' => $failed, 'checks' => $checks];
    }

    /** Sends the check as the response: 200 when ready, 503 otherwise, never cached. */
    public function respond(): void
    {
        $result = $this->check();
        http_response_code($result['ready'] ? 200 : 503);
        header('Content-Type: application/json');
        header('Cache-Control: no-store');
        echo json_encode($result, JSON_UNESCAPED_SLASHES), "\n";
    }

    /**
     * Whether decisions can be made: from this worker's recent decisions, or from one
     * peek() when they failed or are too old to tell (only while Valkey answered the PING:
     * nothing more is sent to a Valkey that is down).
     *
     * @return array<string, mixed>
     */
    private function decisions(bool $reachable): array
    {
        \assert($this->limiter !== null);
        $s = $this->limiter->health(false);
        $at = $s['last_decision_at'];
        $recent = $at !== null && microtime(true) - $at <= self::DECISION_WINDOW_SECONDS;
        $probed = $reachable && ($s['decisions_failing'] || !$recent);
        if ($probed) {
            try {
                $this->limiter->peek(self::PROBE_SHOP);
            } catch (\Throwable) {
                // on_unavailable = throw: the failure is in health() as any other.
            }
            $s = $this->limiter->health(false);
            $ok = $s['consecutive_failed_decisions'] === 0;
        } else {
            $ok = !$s['decisions_failing'];
        }
        return [
            'ok' => $ok,
            'probed' => $probed,
            'consecutive_failed' => $s['consecutive_failed_decisions'],
            'last_decision_at' => $s['last_decision_at'],
            'error' => $ok ? null : $s['last_decision_error'],
        ];
    }

    /** @return array<string, mixed> */
    private function fpm(): array
    {
        if (!function_exists('fpm_get_status')) {
            return ['ok' => true, 'skipped' => 'not running under php-fpm'];
        }
        $s = fpm_get_status();
        if ($s === false) {
            return ['ok' => false, 'error' => 'fpm_get_status() failed'];
        }
        $idle = (int) $s['idle-processes'];
        $queue = (int) $s['listen-queue'];
        return [
            'ok' => $idle >= $this->minIdleWorkers && $queue <= $this->maxListenQueue,
            'idle' => $idle,
            'active' => (int) $s['active-processes'],
            'listen_queue' => $queue,
            'max_children_reached' => (int) $s['max-children-reached'],
        ];
    }
}
