# Session 12 (2026-12-06), the second H200 call: the CUDA wgmma backward's dQ with and without dS shared between
# its consumers and by TMA bulk reduce-add (bench/attn_bwd_cuda.py --dq-own --dq-bulk), the short training run of the bundled example (issue 19: every
# backward through schedgen's kernels, the attention block's now the planner's warp-specialized wgmma kernel), then the
# rowwise GPU tests of the new log-sum-exp merges. Logs in one tarball; guarded.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 550
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 80); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/attention_backward/test_attention_backward_wgmma.py -k "bulk_variant_matches" > $O/t_bulk.log 2>&1
echo "0 bulk dQ GPU tests (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/t_bulk.log | cut -c1-250 | tail -6
T=$(cap 100); timeout $T python3 bench/attn_bwd_cuda.py --dq-own --dq-bulk > $O/own.log 2>&1
echo "0a wgmma dQ shared / own / bulk (rc $?):"; tail -12 $O/own.log | cut -c1-200
T=$(cap 80); timeout $T python3 bench/attn_bwd_cuda.py --dq-own --dq-bulk --causal > $O/own_causal.log 2>&1
echo "0b causal (rc $?):"; tail -8 $O/own_causal.log | cut -c1-200
T=$(cap 200); timeout $T bash -c "python3 -m schedgen build examples/train/qkv.yaml examples/train/proj.yaml examples/train/up.yaml examples/train/down.yaml examples/train/attn.yaml -o build/train > $O/train.log 2>&1 && python3 examples/train_mlp_attention.py --steps 120 --json $O/train.json >> $O/train.log 2>&1"
echo "1 training run (rc $?):"; tail -14 $O/train.log | cut -c1-220
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 70); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/families/rowwise/test_rowwise_gpu.py \
  -k "crossentropy_variants or bundled_spec_at or (ragged_rows and crossentropy) or (softmax_variants and lse)" > $O/t_rowwise.log 2>&1
echo "rowwise GPU tests (the log-sum-exp merges):"; grep -E "^E  |^FAILED|passed|failed" $O/t_rowwise.log | cut -c1-250 | tail -8
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s15.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
