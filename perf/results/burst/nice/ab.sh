#!/bin/bash
# Admission refusal latency: tritonserver (and its stubs) at nice 0 vs nice 10, bursts alternating, one demo serve.
OUT=$1; REPS=${2:-3}; mkdir -p $OUT
cd /work/main
setnice() {  # every thread of every process in tritonserver's process group
  local pg=$(pgrep -x tritonserver | head -1)
  for p in $(pgrep -g $(ps -o pgid= -p $pg | tr -d ' ')); do for t in /proc/$p/task/*; do renice -n $1 -p $(basename $t) >/dev/null 2>&1; done; done
}
for rep in $(seq 1 $REPS); do
  for n in 0 10; do
    setnice $n
    .venv/bin/python perf/burst.py --url http://127.0.0.1:18191 --requests 200 --baseline 5 --out $OUT/burst-n$n-$rep.json > $OUT/burst-n$n-$rep.out 2>&1
    echo "nice $n rep$rep $(python3 -c "
import json; s=json.load(open('$OUT/burst-n$n-$rep.json'))['summary']
print('adm', s['admitted'], 'ref', s['refused'], 'hung', s['hung'], 'err', s['errors'], 'unloaded', s['unloaded_ttfa_s'], 'ttfa', s['admitted_ttfa_s'], 'refusal', s['refusal_s'])")"
  done
done
setnice 0
