<?php
// The threaded host's own test (ThreadsTest): a request starts with none of another
// request's globals; thread 1's request 2 exits 3, thread 2's request 1 dies of a fatal
// error (memory exhausted); the others print "T R".
declare(strict_types=1);

[, $t, $r] = $argv;
if (isset($GLOBALS['seen_by'])) {
    echo "leak: request $t/$r sees a global of request {$GLOBALS['seen_by']}\n";
    exit(9);
}
$GLOBALS['seen_by'] = "$t/$r";
if ($t === '1' && $r === '2') {
    exit(3);
}
if ($t === '2' && $r === '1') {
    ini_set('memory_limit', '4M');
    $s = str_repeat('x', 8 << 20);
}
echo "$t $r\n";
