# Sourced by the long evidence runs (frontier_run.sh, pass_run.sh): one way to start `tracecal evaluate` detached,
# on one thread, at the lowest priority, and to tell whether it is already running.
#
#   running RUN            # true (and says so) when RUN.pid names a live process
#   start_detached RUN ARGS...   # `python -m tracecal.cli evaluate ARGS... --run-dir RUN --no-report`, log RUN.log
#
# Uses REPO (the checkout) and PY (its python). setsid puts the run in an autogroup of its own, which the scheduler
# shares fairly with every other session whatever the nice value inside it: the group is niced too, or it takes a
# whole core from the foreground (measured: the main job's two workers got half a core each beside it). It is niced
# from inside the new session (the `bash -c` below): writing /proc/$!/autogroup from the caller raced the child's
# setsid and niced the caller's own group instead (seen: the calling shell's autogroup at nice 19, the run's at 0).

running() {
    local pidfile=$1.pid
    if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "already running: PID $(cat "$pidfile") (log: $1.log)"
        return 0
    fi
    return 1
}

start_detached() {
    local run=$1
    shift
    cd "$(dirname "$run")"
    PYTHONPATH=$REPO/src HF_HUB_OFFLINE=1 TRACECAL_DATA=${TRACECAL_DATA:-/work/shared/data} \
        OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
        nohup setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' _ \
        "$PY" -m tracecal.cli evaluate "$@" --threads 1 --run-dir "$run" --no-report >>"$run.log" 2>&1 </dev/null &
    echo $! >"$run.pid"
    echo "started: PID $! (log: $run.log, run: $run)"
}
