<?php
// An HTTP liveness endpoint through the application: the existing method that the health
// experiment (scripts/health-experiment.sh) compares with a TCP check. Under a flood the
// flow control refuses it like any request, and a kubelet probing it would restart a
// healthy, merely busy server. deploy/k8s uses tcpSocket liveness instead.
declare(strict_types=1);

header('Content-Type: text/plain');
echo "alive\n";
