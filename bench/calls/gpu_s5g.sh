# Session 5 (2026-12-04), last H200 call: the rowwise family (issue 18: GPU tests, then the bundled specs against a
# device copy, torch's op and torch.compile), then a sweep of block-scaled fp8 schedules (865 TFLOP/s, the target
# 1200).
set -u
D=$OUT; START=$(date +%s)
OUT=/tmp/s5o timeout 330 bash bench/calls/gpu_rowwise.sh; tar czf $D/rowwise.tgz -C /tmp/s5o rowwise
if [ $(( $(date +%s) - START )) -lt 380 ]; then
  mkdir -p /tmp/s5o/bs
  timeout 120 python3 bench/sweep.py specs/matmul_fp8_blockscaled_4096x7168x16384.yaml --iters 20 --out /tmp/s5o/bs/blockscaled.json \
    --variant "s4:schedule.pipeline.max_concurrent_steps=4" \
    --variant "nocluster:schedule.cluster=[1];schedule.in_specs.b.collective_axes=[]" \
    --variant "delay1:schedule.in_specs.a.delay_release=1;schedule.in_specs.b.delay_release=1" \
    > /tmp/s5o/bs/blockscaled.out 2>&1; tail -6 /tmp/s5o/bs/blockscaled.out | cut -c1-120
  tar czf $D/bs.tgz -C /tmp/s5o bs
fi
ls $D
