// signals.hpp — clean stops. SIGINT/SIGTERM (and the --requeue-signal) only set a flag; at the next
// step boundary the ranks agree (one small all-reduce: comm/agree.hpp agree_stop_signal), write a
// checkpoint and exit with 128 + the signal number. A second signal ends the process at once
// (with 128 + its number, or the status already decided: decide_exit), touching no checkpoint (a
// half-written temporary is never renamed and is removed at the next start).
#pragma once

#include <string>

namespace mnist_ddp {

// Installs the SIGINT and SIGTERM handlers (idempotent).
void install_stop_handlers();
// The run's exit status is decided on this rank: every rank agreed to stop (a refused
// configuration, a failed phase: comm/agree.hpp run_agreed), or the run is over (main). From here
// on a stop signal ends the process at once with `code` and dumps nothing: it is the launcher
// ending the ranks still on their way out, because a faster one exited non-zero first. Flushes
// stdio first (a _exit from the handler would lose what is buffered).
void decide_exit(int code);
// Whether decide_exit was called (an agreed stop: main then leaves MPI with the other ranks).
bool exit_decided();
// Makes signo (the --requeue-signal, SIGUSR1 by default) a stop signal like SIGTERM.
void install_requeue_handler(int signo);
// The flight recorder's dump pipe (-1: none). While set, the first stop signal and the dump
// signal write their number to it (write(2) is async-signal-safe); the recorder's thread dumps.
void set_flight_dump_pipe(int fd);
// Makes signo (--flight-dump-signal, SIGUSR2 by default) write to the dump pipe and nothing else:
// the run goes on.
void install_dump_handler(int signo);
// "USR1" -> SIGUSR1 etc. for the signals --requeue-signal accepts (USR1, USR2, TERM, HUP); 0
// for anything else.
int parse_signal(const std::string& name);
// The stop signal this process received (0: none); comm/agree.hpp makes it every rank's.
int stop_signal_received();
// "SIGTERM", "SIGINT", ...
const char* signal_name(int signo);
// The name the signal flags take (--requeue-signal, --flight-dump-signal): "USR1" for SIGUSR1.
const char* signal_flag_name(int signo);

}  // namespace mnist_ddp
