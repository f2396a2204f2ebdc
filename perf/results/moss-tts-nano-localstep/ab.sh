#!/bin/bash
# MOSS-TTS-Nano real size int8 through Triton: before the fixed-cache local step (bf16d49, revision-2 export)
# vs after (main, revision-3 export), c=1 and c=8, default chunk policy and vocoder overlap; alternating.
OUT=$1; REPS=${2:-1}; mkdir -p $OUT
uptime > $OUT/load.txt
run() {  # name root artifacts extra-args
  local name=$1 root=$2 art=$3; shift 3
  cd $root
  PYTHONPATH=$root PATH=/work/main/.venv/bin:$PATH timeout 900 python -c "import sys; from triton_tts.cli import main; sys.exit(main(sys.argv[1:]))" \
    bench compare --family moss_tts_nano --size real --checkpoint /work/moss-real/ckpt \
    --artifacts int8=$art --precisions int8 --no-reference --frames 32 --repeats 1 \
    --concurrency 1 8 --work /work/moss-real/bench-$name --out $OUT/$name-$rep "$@" > $OUT/$name-$rep.log 2>&1
  echo "$name rep$rep $(uptime | sed 's/.*load/load/')"; grep "^| int8" $OUT/$name-$rep.log | tail -2
}
for rep in $(seq 1 $REPS); do
  run before /work/wt/base38b /work/moss-real/art-int8f
  run after /work/main /work/wt/i38-local/build/moss-real-int8
done
uptime >> $OUT/load.txt
