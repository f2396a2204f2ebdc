#!/bin/bash
OUT=$1; REPS=${2:-1}; mkdir -p $OUT
uptime > $OUT/load.txt
run() {  # name root extra-args
  local name=$1 root=$2; shift 2
  cd $root
  PYTHONPATH=$root PATH=/work/main/.venv/bin:$PATH timeout 600 python -c "import sys; from triton_tts.cli import main; sys.exit(main(sys.argv[1:]))" \
    bench compare --family moss_tts_nano --size real --checkpoint /work/moss-real/ckpt \
    --artifacts int8=/work/moss-real/art-int8f --precisions int8 --no-reference --frames 32 --repeats 1 \
    --concurrency 1 8 --work /work/moss-real/bench-$name --out $OUT/$name-$rep "$@" > $OUT/$name-$rep.log 2>&1
  echo "$name rep$rep $(uptime | sed 's/.*load/load/')"; grep "^| int8" $OUT/$name-$rep.log | tail -2
}
for rep in $(seq 1 $REPS); do
  run before /work/wt/base38
  run adaptive-overlap /work/main --vocoder-overlap on
  run ramp /work/main --chunk-policy ramp --vocoder-overlap off
  run ramp-overlap /work/main --chunk-policy ramp --vocoder-overlap on
  TTS_VOCODER_THREADS=1 run ramp-overlap-vt1 /work/wt/exp --chunk-policy ramp --vocoder-overlap on
done
uptime >> $OUT/load.txt
