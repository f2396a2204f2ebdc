#!/bin/bash
# Admission under a 200-stream burst on the demo deployment (Triton 18001): gateways with different limits,
# each its own process on the same Triton, bursts alternating between them.
OUT=$1; REPS=${2:-3}; mkdir -p $OUT
cd /work/main
start() {  # port env...
  local port=$1; shift
  env "$@" nohup .venv/bin/python -m gateway --config /tmp/burstwork/gateway.json --port $port --log-level warning > $OUT/gw-$port.log 2>&1 &
}
start 18095                                   # defaults: 16 + 16 per model
start 18096 TTS_MAX_RUNNING_PER_MODEL=8 TTS_MAX_QUEUED_PER_MODEL=8
start 18097 TTS_MAX_QUEUE_WAIT_S=1.0          # defaults + the estimated-wait bound
sleep 10
uptime > $OUT/load.txt
for rep in $(seq 1 $REPS); do
  for port in 18095 18096 18097; do
    .venv/bin/python perf/burst.py --url http://127.0.0.1:$port --requests 200 --baseline 5 --out $OUT/burst-$port-$rep.json > $OUT/burst-$port-$rep.out 2>&1
    echo "$port rep$rep $(uptime | sed 's/.*load/load/') $(python3 -c "
import json; s=json.load(open('$OUT/burst-$port-$rep.json'))['summary']
print('admitted', s['admitted'], 'refused', s['refused'], 'hung', s['hung'], 'errors', s['errors'], 'unloaded', s['unloaded_ttfa_s'], 'ttfa p50/p95', s['admitted_ttfa_s'], 'refusal', s['refusal_s'], 'after', s['after_burst'])")"
  done
done
uptime >> $OUT/load.txt
pkill -f "port 18095"; pkill -f "port 18096"; pkill -f "port 18097"
