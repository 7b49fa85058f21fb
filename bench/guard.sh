# Sourced by the device-call scripts (bench/calls/gpu_s12.sh ...): a wall-clock guard for one call. `left` says the
# seconds left of ${GUARD:-$1}; `cap N` gives N or what is left, whichever is smaller (a step's timeout).
START=$(date +%s)
LIMIT=${GUARD:-${1:-550}}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
cap() { local want=$1 l; l=$(left); [ $l -lt $want ] && want=$l; echo $want; }
