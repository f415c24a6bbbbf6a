<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The reference model of one limiter (one name, one set of constructor options) on two
 * Valkey databases: everything its decisions depend on, in pure PHP, no I/O.
 *
 * Time-independent by construction: the driver only uses rates so slow (one token per
 * 500-2000 s) that no bucket refills a whole token during a sequence, so a bucket is an
 * integer level of tokens. The only clocks are the deadlines of hot marks (short marks and
 * `auto_hot` marks) and the `auto_hot` window, given by the driver as wall-clock seconds
 * (the host's clock is Valkey's: same machine). A deadline is an interval [lo, hi], as
 * uncertain as the operation that set it; the driver never asks while a deadline it
 * cannot place is near (see guardUntil()).
 *
 * Per database: bucket levels (global, hot lane, one hot-shop bucket per shop), hot marks,
 * live limits (overrides of the constructor's buckets), whether a worker has published
 * its settings (the CLI's `set` needs them), and the `auto_hot` window counts.
 *
 * A level is `null` while the bucket is full (nothing taken since it was last full: it is
 * full at whatever capacity is in force), else the level stored. A live change carries
 * the level over, clamped to the capacity in force; CARRY_OVER says when the clamped level
 * is stored (what a later increase of the capacity finds):
 *   'applied': by the first decision the bucket applies to, denied or not (docs/operations.md, "Live
 *              limits": "a bucket carried over is written back at once (denied or not)";
 *              "a bucket nobody touched across two changes is read as if the older limits
 *              held until the later change");
 *   'taken':   only by a decision that takes tokens from it;
 *   'change':  at the change itself, for every bucket (what `set` does: see clampAll()).
 *
 * The `adaptive` option (crates/model/src/adaptive.rs, mirrored here operation for
 * operation in doubles: permilleAt(), feedbackOutcome(), scaledArgs()): per database the
 * stored state [t0, k, wmax, pause_until] (µs, µs, permille, µs) or null. A decision is
 * made at a share `p` (permille) and a pause flag that the driver gives (decide() at the
 * instants the call may have run: both are monotonic in time, so the driver tries each
 * share between the call's start and end): paused, every shop is denied (`provider`,
 * nothing taken or written, settings not published); otherwise every bucket at `p` of
 * the limits in force, its level carried over from the share it was written at (the
 * level clamped to the scaled capacity, and a bucket that is full at it has no key), and
 * a share of 1000 removes the state. After a feedback() the driver reads the stored state
 * back and checks it is one feedbackOutcome() gives at some instant of that call
 * (reconcileFeedback()); the model goes on from what Valkey stored.
 */
final class LimiterModel
{
    public const LANES = ['global', 'hot_lane', 'hot_shop'];

    /** See the class comment: 'applied', 'taken' or 'change'. */
    public const CARRY_OVER = 'change';

    /** Largest refill rate the driver uses: bounds how far a level drifts above an integer. */
    public const MAX_RATE = 0.002;

    public const MAX_CAPACITY = 1_000_000_000;

    /** Far future, for marks with a TTL of an hour or more (never run out in a sequence). */
    private const FOREVER = 1e18;

    /** @var array<string, array{0: int, 1: float}> the constructor's buckets by lane */
    private array $base;
    /** @var array<string, true> */
    private array $staticHot;
    /** @var array{share: float, ttl: int, min: int, window: int}|null */
    private ?array $autoHot;
    /** @var array<int, array> per database, see fresh() */
    private array $db;
    /** @var array{statuses: list<int>, decrease: float, floor: int, recover: int}|null */
    private ?array $adaptive = null;

    /** adaptive.rs's constants. */
    public const COOLDOWN_US = 1_000_000;
    public const MAX_PAUSE_US = 60_000_000;

    public function __construct(array $options)
    {
        $this->base = [];
        foreach (self::LANES as $lane) {
            if (isset($options[$lane])) {
                $this->base[$lane] = [(int) $options[$lane]['capacity'], (float) $options[$lane]['refill_per_second']];
            }
        }
        $this->staticHot = array_fill_keys(array_map('strval', $options['hot_shops'] ?? []), true);
        $a = $options['auto_hot'] ?? null;
        $this->autoHot = is_array($a) ? [
            'share' => (float) $a['share'],
            'ttl' => (int) $a['ttl_seconds'],
            'min' => (int) $a['min_tokens'],
            'window' => (int) $a['window_seconds'],
        ] : null;
        $ad = $options['adaptive'] ?? false;
        if ($ad !== false) {
            $ad = is_array($ad) ? $ad : [];
            $minShare = (float) ($ad['min_share'] ?? 0.1);
            $recover = (float) ($ad['recover_seconds'] ?? 60);
            $statuses = array_map('intval', $ad['statuses'] ?? [429]);
            sort($statuses);
            $this->adaptive = [
                'statuses' => $statuses,
                'decrease' => (float) ($ad['decrease'] ?? 0.7),
                // AdaptParams::new
                'floor' => max(1, min(1000, (int) round($minShare * 1000.0))),
                'recover' => max(1, (int) round($recover * 1e6)),
            ];
        }
        $this->db = [0 => self::fresh(), 1 => self::fresh()];
    }

    private static function fresh(): array
    {
        return [
            'levels' => ['global' => null, 'hot_lane' => null],
            /** hot_shop levels by shop */
            'shops' => [],
            /** shop => [lo, hi, kind] */
            'marks' => [],
            /** lane => [capacity, rate] */
            'live' => [],
            /** the live mode is shadow (`limiter set mode=shadow`; the option is enforce) */
            'shadow' => false,
            'published' => false,
            /** window number => [shop => tokens, '' => total] */
            'counts' => [],
            /** the adaptive state [t0, k, wmax, pause_until] or null */
            'adapt' => null,
            /** the share (permille) each stored level was written at: lane => p, shops */
            'at' => [],
            'shopAt' => [],
        ];
    }

    public function base(): array
    {
        return $this->base;
    }

    public function isStaticHot(string $shop): bool
    {
        return isset($this->staticHot[$shop]);
    }

    /** The buckets in force on `$db`: lane => [capacity, rate]. */
    public function limits(int $db): array
    {
        return self::applyLive($this->base, $this->db[$db]['live']);
    }

    public static function applyLive(array $base, array $live): array
    {
        $out = $base;
        foreach ($live as $lane => $bucket) {
            if (isset($out[$lane])) {
                $out[$lane] = $bucket;
            }
        }
        return $out;
    }

    /**
     * Why `$live` over `$base` is refused, or null when valid: the constructor's rules
     * (only configured buckets, capacity 1..1e9, hot buckets not above global).
     */
    public static function refusal(array $base, array $live): ?string
    {
        foreach ($live as $lane => $_) {
            if (!isset($base[$lane])) {
                return "$lane is not configured by the constructor";
            }
        }
        $limits = self::applyLive($base, $live);
        foreach ($limits as $lane => [$cap, $rate]) {
            if ($cap < 1 || $cap > self::MAX_CAPACITY) {
                return "$lane.capacity $cap";
            }
            if (!($rate > 0.0) || $rate > 1e6) {
                return "$lane.refill_per_second $rate";
            }
        }
        foreach (['hot_lane', 'hot_shop'] as $lane) {
            if (!isset($limits[$lane])) {
                continue;
            }
            if ($limits[$lane][0] > $limits['global'][0]) {
                return "$lane.capacity above global's";
            }
            if ($limits[$lane][1] > $limits['global'][1]) {
                return "$lane.refill_per_second above global's";
            }
        }
        return null;
    }

    // ---- hot marks -------------------------------------------------------------------

    /** Whether the mark of `$shop` is in force at `$t`: true, false, or null (can't tell). */
    public function markAt(int $db, string $shop, float $t): ?bool
    {
        $m = $this->db[$db]['marks'][$shop] ?? null;
        if ($m === null) {
            return false;
        }
        if ($t < $m[0]) {
            return true;
        }
        if ($t > $m[1]) {
            return false;
        }
        return null;
    }

    /** Whether an acquire for `$shop` between `$t0` and `$t1` cannot be told hot or not. */
    public function hotAmbiguous(int $db, string $shop, float $t0, float $t1): bool
    {
        if ($this->isStaticHot($shop)) {
            return false;
        }
        $a = $this->markAt($db, $shop, $t0);
        $b = $this->markAt($db, $shop, $t1);
        return $a === null || $b === null || $a !== $b;
    }

    /** markHot(), the CLI's `hot`: with a TTL of an hour, it never runs out here. */
    public function markHot(int $db, string $shop, string $kind = 'marked'): void
    {
        $this->db[$db]['marks'][$shop] = [self::FOREVER, self::FOREVER, $kind];
    }

    /** A mark that runs out between `$lo` and `$hi`. */
    public function markUntil(int $db, string $shop, float $lo, float $hi, string $kind = 'short'): void
    {
        $this->db[$db]['marks'][$shop] = [$lo, $hi, $kind];
    }

    public function unmarkHot(int $db, string $shop): void
    {
        unset($this->db[$db]['marks'][$shop]);
    }

    /** Forgets marks certainly run out by `$t`. */
    public function expire(float $t): void
    {
        foreach ($this->db as $i => $st) {
            foreach ($st['marks'] as $shop => $m) {
                if ($t > $m[1]) {
                    unset($this->db[$i]['marks'][$shop]);
                }
            }
        }
    }

    /**
     * The earliest instant at or after `$t` when no mark deadline is within
     * [lo - $before, hi + $after], nor (with auto_hot) a window boundary within $edge.
     */
    public function guardUntil(float $t, float $before = 0.060, float $after = 0.040, float $edge = 0.050): float
    {
        for ($round = 0; $round < 100; $round++) {
            $moved = false;
            foreach ($this->db as $st) {
                foreach ($st['marks'] as $m) {
                    if ($m[1] >= self::FOREVER) {
                        continue;
                    }
                    if ($t >= $m[0] - $before && $t <= $m[1] + $after) {
                        $t = $m[1] + $after;
                        $moved = true;
                    }
                }
            }
            if ($this->autoHot !== null) {
                $w = $this->autoHot['window'];
                $next = ceil($t / $w) * $w;
                $prev = floor($t / $w) * $w;
                if ($t - $prev <= $edge) {
                    $t = $prev + $edge + 0.001;
                    $moved = true;
                } elseif ($next - $t <= $edge) {
                    $t = $next + $edge + 0.001;
                    $moved = true;
                }
            }
            if (!$moved) {
                return $t;
            }
        }
        return $t;
    }

    // ---- decisions -------------------------------------------------------------------

    /** The level of `$lane`'s bucket (for `$shop` when hot_shop) under the limits in force. */
    private function stored(int $db, string $lane, string $shop): ?int
    {
        return $lane === 'hot_shop'
            ? ($this->db[$db]['shops'][$shop] ?? null)
            : $this->db[$db]['levels'][$lane];
    }

    private function level(int $db, string $lane, string $shop, array $limits): int
    {
        $stored = $this->stored($db, $lane, $shop);
        $cap = $limits[$lane][0];
        return $stored === null ? $cap : min($stored, $cap);
    }

    private function store(int $db, string $lane, string $shop, ?int $level, int $permille = 1000): void
    {
        if ($lane === 'hot_shop') {
            $this->db[$db]['shops'][$shop] = $level;
            $this->db[$db]['shopAt'][$shop] = $permille;
        } else {
            $this->db[$db]['levels'][$lane] = $level;
            $this->db[$db]['at'][$lane] = $permille;
        }
    }

    private function writtenAt(int $db, string $lane, string $shop): int
    {
        return $lane === 'hot_shop'
            ? ($this->db[$db]['shopAt'][$shop] ?? 1000)
            : ($this->db[$db]['at'][$lane] ?? 1000);
    }

    // ---- the adaptive budget (crates/model/src/adaptive.rs) ---------------------------

    /** @return array{statuses: list<int>, decrease: float, floor: int, recover: int}|null */
    public function adaptive(): ?array
    {
        return $this->adaptive;
    }

    /** The stored state of `$db`: [t0, k, wmax, pause_until] or null. */
    public function adaptState(int $db): ?array
    {
        return $this->db[$db]['adapt'];
    }

    public function setAdaptState(int $db, ?array $state): void
    {
        $this->db[$db]['adapt'] = $state;
    }

    /** AdaptState::permille_at: the same double operations in the same order. */
    public static function permilleAt(array $s, int $now, int $floor, int $recover): int
    {
        $dt = (float) max($now - $s[0], 0);
        $x = ($dt - (float) $s[1]) / (float) $recover;
        $w = floor((float) $s[2] + (float) (1000 - $floor) * ($x * $x * $x));
        if ($w > 1000.0) {
            return 1000;
        }
        if ($w < (float) $floor) {
            return $floor;
        }
        return (int) $w;
    }

    /** AdaptState::recovered_at. */
    public static function recoveredAt(array $s, int $floor, int $recover): int
    {
        if ($floor >= 1000) {
            return $s[0];
        }
        $rest = (max(1000 - $s[2], 0) / (float) (1000 - $floor)) ** (1.0 / 3.0);
        return $s[0] + $s[1] + (int) ceil((float) $recover * $rest);
    }

    /**
     * adaptive::feedback: the state after a throttling answer at `$now` (µs) and whether it
     * decreased / extended the pause.
     *
     * @return array{state: array, decreased: bool, paused: bool, from: int, to: int}
     */
    public static function feedbackOutcome(?array $stored, int $now, int $floor, int $recover, float $decrease, int $retryAfterUs): array
    {
        $s = $stored ?? [0, 0, 1000, 0];
        $from = self::permilleAt($s, $now, $floor, $recover);
        $decreased = false;
        if ($floor < 1000 && ($stored === null || $now - $s[0] >= self::COOLDOWN_US)) {
            $s0 = max((int) floor((float) $from * $decrease), $floor);
            $k = (int) floor((float) $recover * (((float) ($from - $s0) / (float) (1000 - $floor)) ** (1.0 / 3.0)));
            $s = [$now, $k, $from, $s[3]];
            $decreased = true;
        }
        $paused = false;
        if ($retryAfterUs > 0) {
            $until = $now + min($retryAfterUs, self::MAX_PAUSE_US);
            if ($until > $s[3]) {
                $s[3] = $until;
                $paused = true;
            }
        }
        return ['state' => $s, 'decreased' => $decreased, 'paused' => $paused, 'from' => $from, 'to' => self::permilleAt($s, $now, $floor, $recover)];
    }

    /** adaptive::scaled_args: [interval µs, tolerance µs] at `$permille`. */
    public static function scaledArgs(int $interval, int $tolerance, int $permille): array
    {
        if ($permille >= 1000) {
            return [$interval, $tolerance];
        }
        $p = (float) $permille;
        $cap = floor((float) $tolerance / (float) $interval);
        $cap = max((int) floor($cap * $p / 1000.0), 1);
        $i = (int) ceil((float) $interval * 1000.0 / $p);
        return [$i, $cap * $i];
    }

    /** The limits (lane => [capacity, rate]) at `$permille`, as the scaled buckets hold them. */
    public static function scaledLimits(array $limits, int $permille): array
    {
        if ($permille >= 1000) {
            return $limits;
        }
        foreach ($limits as $lane => [$cap, $rate]) {
            $interval = (int) ceil(1_000_000.0 / $rate);
            [$i, $t] = self::scaledArgs($interval, $cap * $interval, $permille);
            $limits[$lane] = [intdiv($t, $i), 1_000_000.0 / $i];
        }
        return $limits;
    }

    /** Whether `$status` is a throttling answer for this limiter (adaptive on, listed). */
    public function throttles(int $status): bool
    {
        return $this->adaptive !== null && in_array($status, $this->adaptive['statuses'], true);
    }

    /** "t0:k:wmax:pause_until", as the scripts store it. */
    public static function encodeAdapt(?array $s): ?string
    {
        return $s === null ? null : implode(':', $s);
    }

    /** AdaptState::read_like_the_script (null: no state). */
    public static function decodeAdapt(string|false|null $raw): ?array
    {
        if (!is_string($raw) || preg_match('/^(\d+):(\d+):(\d+):(\d+)$/D', $raw, $m) !== 1) {
            return null;
        }
        $f = array_map('intval', array_slice($m, 1));
        return $f[2] <= 1000 ? $f : null;
    }

    /**
     * A feedback() made between `$ta` and `$tb` (µs) found the stored state `$observed`
     * (null: none): null when some instant of the call explains it as feedbackOutcome()
     * (or nothing written, for a status that does not throttle), else why not. The model
     * then holds `$observed`. `$retryAfterUs` as the limiter was given it (±1 µs of rounding).
     */
    public function reconcileFeedback(int $db, int $status, int $retryAfterUs, int $ta, int $tb, ?array $observed): ?string
    {
        $before = $this->db[$db]['adapt'];
        $show = fn (?array $s) => $s === null ? 'none' : implode(':', $s);
        if (!$this->throttles($status)) {
            if ($observed !== $before) {
                return sprintf('status %d does not throttle, the state changed: %s -> %s', $status, $show($before), $show($observed));
            }
            return null;
        }
        $a = $this->adaptive;
        $explain = fn (int $now): array => self::feedbackOutcome($before, $now, $a['floor'], $a['recover'], $a['decrease'], $retryAfterUs);
        $near = fn (array $x, ?array $y) => $y !== null && $x[0] === $y[0] && $x[1] === $y[1] && $x[2] === $y[2] && abs($x[3] - $y[3]) <= 1;
        // The instants that could explain it: the stored t0 (a decrease), the pause's start
        // (an extension), or any instant of the call (the ends, when neither moved).
        $candidates = [$ta, $tb];
        if ($observed !== null) {
            $candidates[] = $observed[0];
            if ($retryAfterUs > 0) {
                $candidates[] = $observed[3] - min($retryAfterUs, self::MAX_PAUSE_US);
            }
            if ($before !== null) {
                $candidates[] = $before[0] + self::COOLDOWN_US - 1;
                $candidates[] = $before[0] + self::COOLDOWN_US;
            }
        }
        foreach ($candidates as $now) {
            if ($now < $ta || $now > $tb) {
                continue;
            }
            $o = $explain($now);
            // Nothing decreased nor paused: the script may leave the state as it was.
            if ($near($o['state'], $observed) || (!$o['decreased'] && !$o['paused'] && $observed === $before)) {
                $this->db[$db]['adapt'] = $observed;
                return null;
            }
        }
        $this->db[$db]['adapt'] = $observed;
        return sprintf(
            'state %s -> %s, not what feedback(%d, retry after %d µs) gives between %d and %d (at the start: %s, at the end: %s)',
            $show($before),
            $show($observed),
            $status,
            $retryAfterUs,
            $ta,
            $tb,
            $show($explain($ta)['state']),
            $show($explain($tb)['state'])
        );
    }

    /**
     * One acquire of `$n` tokens for `$shop` on `$db`, asked between `$t0` and `$t1`.
     * `$markInForce` settles a mark whose deadline fell inside the call (see
     * hotAmbiguous()); otherwise the mark is judged at `$t0`.
     *
     * @return array{allowed: bool, reason: string, remaining: int, retryAfter: float,
     *   isHotShop: bool, retryExact: bool, minRate: float, lanes: list<string>, becameHot: bool}
     */
    public function acquire(int $db, string $shop, int $n, float $t0, float $t1, ?bool $markInForce = null, int $permille = 1000, bool $paused = false, ?array $retryRange = null): array
    {
        $st = &$this->db[$db];
        if ($paused) {
            // step_adaptive: denied by the provider's pause, nothing taken or written.
            $static = $this->isStaticHot($shop);
            $marked = $markInForce ?? ($this->markAt($db, $shop, $t0) ?? true);
            return [
                'allowed' => false,
                'reason' => 'provider',
                'remaining' => 0,
                'retryAfter' => $retryRange[1] ?? 0.0,
                'retryRange' => $retryRange,
                'isHotShop' => $static || $marked,
                'retryExact' => true,
                'minRate' => INF,
                'lanes' => [],
                'becameHot' => false,
                'permille' => $permille,
            ];
        }
        $st['published'] = true;
        $limits = $this->scaledLimits($this->limits($db), $permille);
        $static = $this->isStaticHot($shop);
        $marked = $markInForce ?? ($this->markAt($db, $shop, $t0) ?? true);
        if (!$marked) {
            unset($st['marks'][$shop]);
        }
        $hot = $static || $marked;
        $lanes = ['global'];
        if ($hot) {
            foreach (['hot_lane', 'hot_shop'] as $lane) {
                if (isset($limits[$lane])) {
                    $lanes[] = $lane;
                }
            }
        }
        $levels = [];
        $reason = 'allowed';
        foreach ($lanes as $lane) {
            $levels[$lane] = $this->level($db, $lane, $shop, $limits);
            if ($reason === 'allowed' && $levels[$lane] < $n) {
                $reason = $lane;
            }
        }
        $allowed = $reason === 'allowed';
        $retry = 0.0;
        $exact = true;
        $minRate = INF;
        foreach ($lanes as $lane) {
            [$cap, $rate] = $limits[$lane];
            $minRate = min($minRate, $rate);
            if (!$allowed) {
                $retry = max($retry, max(0, $n - $levels[$lane]) / $rate);
                if ($n > $cap) {
                    $exact = false;
                }
            }
        }
        $became = false;
        if ($this->adaptive !== null) {
            // A share other than the one a bucket was written at: carried over at once
            // (denied or not), its level clamped to the scaled capacity; full there, its key
            // lives no longer (PX of the time until full).
            foreach ($lanes as $lane) {
                $stored = $this->stored($db, $lane, $shop);
                if ($stored !== null && $this->writtenAt($db, $lane, $shop) !== $permille) {
                    $this->store($db, $lane, $shop, $levels[$lane] >= $limits[$lane][0] ? null : $levels[$lane], $permille);
                }
            }
            if ($permille >= 1000) {
                $st['adapt'] = null;   // recovered (or none): the decision DELs the state
            }
        }
        if (self::CARRY_OVER === 'applied') {
            // Carried over and written back, denied or not (a no-op under the same limits).
            foreach ($lanes as $lane) {
                if ($this->stored($db, $lane, $shop) !== null) {
                    $this->store($db, $lane, $shop, $levels[$lane]);
                }
            }
        }
        if ($allowed) {
            foreach ($lanes as $lane) {
                $levels[$lane] -= $n;
                $this->store($db, $lane, $shop, $levels[$lane], $permille);
            }
            if ($this->autoHot !== null) {
                $became = $this->countAutoHot($db, $shop, $n, $hot, $t0, $t1);
            }
        }
        return [
            'allowed' => $allowed,
            'reason' => $reason,
            'remaining' => min($levels),
            'retryAfter' => $retry,
            'isHotShop' => $hot,
            'retryExact' => $exact,
            'minRate' => $minRate,
            'lanes' => $lanes,
            'becameHot' => $became,
            'permille' => $permille,
        ];
    }

    /**
     * The `auto_hot` bookkeeping of an allowed acquire, as the script does it: this
     * window's counts plus the previous window's weighted by how much of it still lies in
     * the sliding window. Returns whether the shop became hot.
     */
    private function countAutoHot(int $db, string $shop, int $n, bool $hot, float $t0, float $t1): bool
    {
        $a = $this->autoHot;
        $st = &$this->db[$db];
        $wUs = $a['window'] * 1_000_000;
        $nowUs = floor($t0 * 1e6);
        $win = (int) floor($nowUs / $wUs);
        $st['counts'][$win][$shop] = ($st['counts'][$win][$shop] ?? 0) + $n;
        $st['counts'][$win][''] = ($st['counts'][$win][''] ?? 0) + $n;
        $mine = $st['counts'][$win][$shop];
        $all = $st['counts'][$win][''];
        $prev = $st['counts'][$win - 1] ?? [];
        if ($prev !== []) {
            $f = 1 - fmod($nowUs, $wUs) / $wUs;
            $mine = $mine + ($prev[$shop] ?? 0) * $f;
            $all = $all + ($prev[''] ?? 0) * $f;
        }
        if (!$hot && $mine >= $a['min'] && $mine > $a['share'] * $all) {
            if ($a['ttl'] >= 3600) {
                $this->markHot($db, $shop, 'auto');
            } else {
                $this->markUntil($db, $shop, $t0 + $a['ttl'], $t1 + $a['ttl'], 'auto');
            }
            return true;
        }
        return false;
    }

    // ---- administration --------------------------------------------------------------

    /** reset() from a worker: every bucket of `$db` full again; marks, live limits, counts stay. */
    public function reset(int $db): void
    {
        $this->db[$db]['levels'] = ['global' => null, 'hot_lane' => null];
        $this->db[$db]['shops'] = [];
        $this->db[$db]['at'] = [];
        $this->db[$db]['shopAt'] = [];
    }

    /** FLUSHALL or an empty restart: everything gone on both databases. */
    public function flushAll(): void
    {
        $this->db = [0 => self::fresh(), 1 => self::fresh()];
    }

    public function published(int $db): bool
    {
        return $this->db[$db]['published'];
    }

    public function live(int $db): array
    {
        return $this->db[$db]['live'];
    }

    /**
     * The CLI's `set` on `$db`: `$changes` lane => [capacity, rate] or null (back to the
     * constructor's value). Returns null when accepted (the model changed), or why it is
     * refused (the model unchanged).
     */
    public function set(int $db, array $changes): ?string
    {
        if (!$this->db[$db]['published']) {
            return 'no settings published';
        }
        $next = $this->db[$db]['live'];
        foreach ($changes as $lane => $bucket) {
            if (!isset($this->base[$lane])) {
                return "$lane is not configured by the constructor";
            }
            if ($bucket === null) {
                unset($next[$lane]);
            } else {
                $next[$lane] = $bucket;
            }
        }
        $why = self::refusal($this->base, $next);
        if ($why !== null) {
            return $why;
        }
        if (self::CARRY_OVER === 'change') {
            $this->clampAll($db, $this->limits($db), self::applyLive($this->base, $next));
        }
        $this->db[$db]['live'] = $next;
        return null;
    }

    /**
     * `limiter set mode=...`: 'shadow', 'enforce' or 'default' (the option's: enforce).
     * The buckets are unchanged; decisions are made and taken as before, every call let
     * through while shadow. Returns why the CLI refuses, or null.
     */
    public function setMode(int $db, string $mode): ?string
    {
        if (!$this->db[$db]['published']) {
            return 'no settings published';
        }
        $this->db[$db]['shadow'] = $mode === 'shadow';
        return null;
    }

    public function isShadow(int $db): bool
    {
        return $this->db[$db]['shadow'];
    }

    /**
     * CARRY_OVER 'change' (what `set` does): every bucket is carried over at the change. The
     * global bucket and the hot lane are known keys: a full one (no key) carries its old
     * capacity, clamped to the new one. A hot-shop bucket without a key (full) stays full at
     * whatever capacity comes; one clamped to the new capacity is full (its key deleted).
     */
    private function clampAll(int $db, array $old, array $limits): void
    {
        foreach (['global', 'hot_lane'] as $lane) {
            if (!isset($limits[$lane], $old[$lane])) {
                continue;
            }
            $l = $this->db[$db]['levels'][$lane] ?? $old[$lane][0];
            $this->db[$db]['levels'][$lane] = min($l, $limits[$lane][0]);
            $this->db[$db]['at'][$lane] = 1000;
        }
        foreach ($this->db[$db]['shops'] as $shop => $l) {
            if ($l !== null && isset($limits['hot_shop'])) {
                $c = min($l, $limits['hot_shop'][0]);
                $this->db[$db]['shops'][$shop] = $c >= $limits['hot_shop'][0] ? null : $c;
                $this->db[$db]['shopAt'][$shop] = 1000;
            }
        }
    }

    /** A readable summary of `$db`'s state, for failure messages. */
    public function describe(int $db): string
    {
        $st = $this->db[$db];
        $limits = $this->limits($db);
        $parts = [];
        foreach ($limits as $lane => [$cap, $rate]) {
            $parts[] = "$lane=$cap/$rate";
        }
        $lv = [];
        foreach ($st['levels'] as $lane => $l) {
            if (isset($limits[$lane])) {
                $lv[] = "$lane:" . ($l === null ? 'full' : $l);
            }
        }
        foreach ($st['shops'] as $shop => $l) {
            $lv[] = "shop[$shop]:$l";
        }
        $marks = [];
        foreach ($st['marks'] as $shop => [$lo, $hi, $kind]) {
            $marks[] = $lo >= self::FOREVER ? "$shop($kind)" : sprintf('%s(%s until %.3f..%.3f)', $shop, $kind, $lo, $hi);
        }
        $counts = [];
        foreach ($st['counts'] as $win => $c) {
            $counts[] = "$win:" . json_encode($c);
        }
        return sprintf(
            'db%d limits [%s] levels [%s] marks [%s] published %s counts [%s]%s',
            $db,
            implode(' ', $parts),
            implode(' ', $lv),
            implode(' ', $marks),
            $st['published'] ? 'yes' : 'no',
            implode(' ', $counts),
            $this->adaptive === null ? '' : ' adapt ' . ($st['adapt'] === null ? 'none' : implode(':', $st['adapt']))
        );
    }
}
