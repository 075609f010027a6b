#!/usr/bin/env bash
# refusal_test.sh — a configuration every rank refuses is one clean exit, on every launch: one
# `mnist_ddp: error:` line, exit 2, and no flight-recorder dump or "SIGTERM received" from any
# rank. The first rank to exit non-zero makes mpirun SIGTERM the others while they are still on
# their way out; before the exit was decided on every rank (process/signals.hpp decide_exit, the
# barrier in mpi_finalize) their stop handler dumped the flight recorder in about 1 launch in 20.
# So the refusals are launched many times (REFUSAL_LAUNCHES, 50 by default), three kinds in turn,
# at three agreement points after the flight recorder is armed (a dump is possible at each): the
# device's checks (--amp fp16 on the CPU), the data (a --data directory that does not exist) and
# the start state (a --resume file that does not exist, after the model is built). The same
# under srun: tests/slurm/slurm_test.sh.
source "$(dirname "$0")/lib.sh"
N="${REFUSAL_LAUNCHES:-50}"
DATA="$REPO/data/dataset"
KINDS=("--resume $TMP/no-such.h5|checkpoint $TMP/no-such.h5: no such file"
  "--amp fp16|--amp fp16: this run is on the CPU"
  "--data $TMP/no-such-data|--data $TMP/no-such-data: directory does not exist")

clean=0 dumped=0 bad=0 first_bad=""
t0=$SECONDS
for ((i = 0; i < N; i++)); do
  IFS='|' read -r flags pattern <<<"${KINDS[i % 3]}"
  # shellcheck disable=SC2086  # flags is two words
  run "refused$i" 60 mpirun -np 2 "$BIN" --device cpu --data "$DATA" --progress off --max-steps 1 \
    --log-dir "$TMP/l$i" --checkpoint-dir "$TMP/c$i" $flags
  dumps=$(grep -c "flight recorder\|received)" "$ERR")
  files=$(ls "$TMP/l$i"/flight-rank* 2>/dev/null | wc -l)
  errors=$(grep -c "^mnist_ddp: error: " "$ERR")
  if ((dumps > 0 || files > 0)); then dumped=$((dumped + 1)); fi
  if [[ $RC -eq 2 ]] && ((errors == 1 && dumps == 0 && files == 0)) && grep -q -- "$pattern" "$ERR" &&
    holds "$SECS < 30"; then
    clean=$((clean + 1))
  else
    bad=$((bad + 1))
    [[ -z "$first_bad" ]] && first_bad="launch $i ($flags): rc=$RC, $errors error line(s), $dumps dump line(s), $files dump file(s), ${SECS}s: $(tr '\n' ' ' <"$ERR" | cut -c1-400)"
  fi
done
if ((clean == N)); then
  pass "refusals_leave_cleanly ($N launches under mpirun -np 2, three kinds: $clean clean, 0 dumps, $((SECONDS - t0)) s)"
else
  fail "refusals_leave_cleanly: $clean of $N clean, $dumped with a flight dump" "$first_bad"
fi
finish
