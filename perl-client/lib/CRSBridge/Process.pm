package CRSBridge::Process;

# One crs-bridge server process and the pipes to it: start, write and read lines with a
# deadline, stop. Knows nothing of JSON-RPC. Failures are thrown as CRSBridge::Process::Error
# objects whose kind ('died', 'timeout') tells the caller what to do next.

use strict;
use warnings;

use File::Spec;
use POSIX qw(EAGAIN);
use Time::HiRes qw(time);

use CRSBridge::Config;
use CRSBridge::Load;
use CRSBridge::SafeKill;

use constant F_SETPIPE_SZ => 1031;
use constant PIPE_SIZE => 1 << 20;
# After asking a server to stop: how long it may take to close its output before it is killed.
use constant STOP_SECONDS => 2;
# How long (seconds) _wait polls for the server's answer before it sleeps in select; see _poll.
use constant POLL_SECONDS => 1e-3;
use constant MONOTONIC => eval { Time::HiRes::CLOCK_MONOTONIC() } // 0;    # (0: the realtime clock)

=head1 NAME

CRSBridge::Process - a crs-bridge server process speaking line-framed messages

=head1 DESCRIPTION

The server is started as a grandchild (fork, fork, exec; the middle process exits at once),
so it is no child of the caller: whatever the caller does later (C<exec> of itself as daemons
do on reload, a C<$SIG{CHLD}> handler that reaps every child), the server ends by itself at the
end of its input and init reaps it; it leaves no zombie behind. Its stdin and stdout are pipes
that are close-on-exec here (their descriptors are above 2 whatever the caller has closed), and
its stderr is the caller's or a log file (see C<log> in L<CRSBridge::Config>).

Two variables are set in the server's environment (C<crs-bridge serve> takes them as the
defaults of its options of the same meaning; the environment reaches the server through any
wrapper command, where appended options might not): C<CRS_BRIDGE_CLIENT_PID>
(C<--client-pid>), this process's id, which the server tags its log lines with and whose end
it watches: it exits once this process is gone, even if a forked child still holds copies of
the pipes; and C<CRS_BRIDGE_LOG_TARGET> (C<--log-target>): C<syslog> when the C<log> setting is
C<syslog>, else C<auto> (stderr, or syslog when stderr is closed or F</dev/null>).

=head1 LAST-READ HANDLE

Perl's readline, C<seek>, C<sysseek> and C<tell> make their handle the last-read one
(C<${^LAST_FH}>, whose line number C<$.> is, and which C<die> names: C<, E<lt>STDINE<gt> line 29.>).
The binding leaves the caller's in place, so the client runs each such operation on a handle of
its own under C<local $.>, which restores the caller's last-read handle at the end of the scope.

=head1 METHODS

=over

=item command()

The server command as a list of words (C<command> in L<CRSBridge::Config>), without the
options the client adds.

=cut

sub command {
    return CRSBridge::Config::get('command');
}

=item spawn()

Starts the server (C<command>, with the environment above) and returns the process object. Dies with a message saying why when it cannot be started (a program that
does not exist, a log file that cannot be opened).

=cut

sub spawn {
    my ($class) = @_;
    my $cmd = command();
    my $log = CRSBridge::Config::get('log');
    my %env = (CRS_BRIDGE_CLIENT_PID => $$, CRS_BRIDGE_LOG_TARGET => $log eq 'syslog' ? 'syslog' : 'auto');
    my @held = _hold_std_fds();
    CRSBridge::Load::watch();    # here, so that /proc/loadavg gets no fd 0 to 2 either
    my $stderr = _server_stderr($log);
    pipe(my $server_in, my $to_server) && pipe(my $from_server, my $server_out) && pipe(my $report, my $report_w)
        or die "crs-bridge: cannot start the server: no pipe: $!\n";
    close($_) for @held;
    _launch($cmd, \%env, [ $server_in, $server_out, $stderr ], $report_w);
    close($_) for $server_in, $server_out, $stderr, $report_w;
    my ($pid, $failure) = _read_report($report);
    die "crs-bridge: cannot start the server '@$cmd': $failure\n" if defined $failure;
    binmode($_) for $to_server, $from_server;
    $_->blocking(0) for $to_server, $from_server;
    # Linux: a 1 MiB pipe takes a whole round's batch in one write (F_SETPIPE_SZ; elsewhere a no-op).
    if ($^O eq 'linux') {
        fcntl($_, F_SETPIPE_SZ, PIPE_SIZE) for $to_server, $from_server;
    }
    return bless {
        pid => $pid, owner => $$, cmd => "@$cmd", log => $log,
        in => $to_server, out => $from_server, rbuf => '', wbuf => '', answered => 0, ended => 0,
        grace => 0, graces => 0,    # see _start_grace
    }, $class;
}

# The server's stderr: a log file, else this process's stderr if it has one, else /dev/null
# (the server then logs to syslog).
sub _server_stderr {
    my ($log) = @_;
    my $fh;
    if ($log =~ m{^/}) {
        open($fh, '>>', $log) or die "crs-bridge: cannot open the log file '$log' for appending: $!"
            . " (the 'log' setting, from " . CRSBridge::Config::source('log') . ")\n";
        return $fh;
    }
    open($fh, '>&', \*STDERR) or open($fh, '>', File::Spec->devnull)
        or die "crs-bridge: cannot open a stderr for the server: $!\n";
    return $fh;
}

# Opens /dev/null on each of the descriptors 0, 1 and 2 the caller has closed, so that the pipes
# made next get higher ones: Perl makes those close-on-exec, and a caller that reopens STDIN or
# STDOUT later gets its usual descriptor. Returns the handles to close once the pipes exist.
sub _hold_std_fds {
    my @held;
    while (open(my $fh, '<', File::Spec->devnull)) {
        last if fileno($fh) > 2;
        push @held, $fh;
    }
    return @held;
}

# Fork a middle process that forks the server and exits at once. The server gets the handles
# @$fds as its stdin, stdout and stderr and the variables %$env; $report receives the server's pid, then an error text if
# it cannot be started (it is close-on-exec: a successful exec shows as its end, and so does
# the middle process's). Signals are
# blocked meanwhile, so that no handler of the caller's (one that dies, say) runs in a copy of it.
sub _launch {
    my ($argv, $env, $fds, $report) = @_;
    my $all = POSIX::SigSet->new;
    $all->fillset;
    my $old = POSIX::SigSet->new;
    POSIX::sigprocmask(POSIX::SIG_BLOCK, $all, $old);
    my $middle = fork();
    if (defined $middle && $middle == 0) {
        my $server = fork();
        _exec_server($argv, $env, $fds, $report, $old) if defined $server && $server == 0;
        syswrite($report, "0\nfork failed: $!\n") if !defined $server;
        POSIX::_exit(0);
    }
    my $error = $!;
    {
        # Reaped before signals are let in (a handler that dies would leave it a zombie, and a
        # SIGCHLD handler of the caller's could take it first): it exits at once.
        local ($?, $!);
        waitpid($middle, 0) if defined $middle;
    }
    POSIX::sigprocmask(POSIX::SIG_SETMASK, $old);
    die "crs-bridge: cannot start the server: fork failed: $error\n" if !defined $middle;
    return;
}

sub _exec_server {
    my ($argv, $env, $fds, $report, $mask) = @_;
    syswrite($report, "$$\n");    # here, so that it comes before any error
    eval {
        for my $fd (0 .. 2) {
            POSIX::dup2(fileno($fds->[$fd]), $fd) // die "dup2: $!\n";
        }
        for my $signal (keys %SIG) {    # the server starts with default dispositions
            $SIG{$signal} = 'DEFAULT' if ref $SIG{$signal} || ($SIG{$signal} // 'DEFAULT') ne 'DEFAULT';
        }
        @ENV{ keys %$env } = values %$env;
        POSIX::sigprocmask(POSIX::SIG_SETMASK, $mask);
        no warnings 'exec';
        exec { $argv->[0] } @$argv or die "$!\n";
    };
    # Taint mode refuses to exec with a PATH from the environment: say what to do about it.
    $@ .= "(under perl -T, set PATH in the program before the first call, as the PVE daemons do)\n"
        if $@ =~ /^Insecure \$ENV\{PATH\}/;
    syswrite($report, $@);
    POSIX::_exit(127);
}

# (server pid, undef) or (undef, why it could not start), from the launch report.
sub _read_report {
    my ($report) = @_;
    my $text = '';
    while (1) {
        my $n = sysread($report, $text, 4096, length $text);
        last if defined $n && $n == 0;
        next if defined $n || $!{EINTR};
        return (undef, "cannot read its start report: $!");
    }
    close($report);
    my ($pid, $failure) = $text =~ /^(\d+)\n(.*)/s or return (undef, 'it could not be started');
    $failure =~ s/\s+$//;
    return (undef, $failure) if $failure ne '' || !$pid;
    return ($pid, undef);
}

=item pid() / answered() / owner() / command_line()

The server's process id; whether it has sent anything yet (a server that dies before its
first line failed to start); the pid of the Perl process that started it; its command.

=cut

sub pid { return $_[0]{pid} }
sub answered { return $_[0]{answered} }
sub owner { return $_[0]{owner} }
sub command_line { return $_[0]{cmd} }

=item queue($bytes, $hold)

Appends bytes to the outgoing buffer and writes what the pipe takes now, without waiting.
When the pipe takes less than all, it also takes in whatever the server has already answered,
so that a server blocked on its full output pipe reads on. With C<$hold> true, the bytes only
wait in the buffer: the next C<queue> or C<read_line> writes them with its own, in one write.

=cut

sub queue {
    my ($self, $bytes, $hold) = @_;
    if (length $self->{wbuf}) {
        $self->{wbuf} .= $bytes;
    } else {
        $self->{wbuf} = $bytes;    # no copy: the two share the bytes
    }
    return if $hold;
    $self->_write_ready if length $self->{wbuf};
    # Only after a short write: a server blocked on its full output pipe reads no more, so its
    # input pipe fills and writes come up short. (A look after every write cost a select per
    # request, 0.5 us, that seldom found anything.)
    $self->_read_ready if length $self->{wbuf} && $self->_readable(0);
    return;
}

=item read_line($deadline)

The next line from the server (without its newline), writing queued bytes meanwhile. Throws
a C<died> error on end of file or a broken pipe, a C<timeout> error when C<$deadline> (epoch
seconds) passes.

=cut

sub read_line {
    my ($self, $deadline) = @_;
    while (1) {
        my $line = $self->_buffered_line;
        return $line if defined $line;
        $self->_wait($deadline);
    }
}

=item ready_line()

The next line from the server if it has already sent all of it, else undef: never waits (it
reads what has arrived). Throws a C<died> error as C<read_line> does.

=cut

sub ready_line {
    my ($self) = @_;
    my $line = $self->_buffered_line;
    return $line if defined $line || !$self->_readable(0);
    $self->_read_ready;
    return $self->_buffered_line;
}

# The first whole line in the read buffer, taken out of it (without its newline); undef if none.
sub _buffered_line {
    my ($self) = @_;
    my $nl = index($self->{rbuf}, "\n");
    return undef if $nl < 0;
    my $line = substr($self->{rbuf}, 0, $nl + 1, '');
    chop $line;
    $self->{answered} = 1;
    return $line;
}

sub _readable {
    my ($self, $timeout) = @_;
    my $bits = '';
    vec($bits, fileno($self->{out}), 1) = 1;
    return select($bits, undef, undef, $timeout) > 0;
}

sub _wait {
    my ($self, $deadline) = @_;
    my $left = $deadline + $self->{grace} - time;
    $left = $self->_start_grace($deadline) if $left <= 0;
    $self->_fail('timeout', 'no answer in time') if $left <= 0;
    return if !length $self->{wbuf} && $self->_poll;
    my ($rbits, $wbits) = ('', '');
    vec($rbits, fileno($self->{out}), 1) = 1;
    vec($wbits, fileno($self->{in}), 1) = 1 if length $self->{wbuf};
    my $n = select(my $r = $rbits, my $w = $wbits, undef, $left);
    return if $n <= 0;    # timeout (checked on the next turn) or a signal
    $self->_write_ready if length $self->{wbuf} && vec($w, fileno($self->{in}), 1);
    $self->_read_ready if vec($r, fileno($self->{out}), 1);
    return;
}

# A server's start on a loaded machine takes many times its quiet time (0.4 s of CPU time,
# waiting for a CPU among dozens of busy tasks): a start is no hang while the server works.
# So a server that has not answered yet and whose deadline passes gets the start-timeout once
# more, up to START_GRACES times, each time it is found working (on a CPU, waiting for one, or
# for the disk); a stopped or blocked one times out at its deadline, and so does one that is
# being stopped (its input closed). Returns the seconds left then (<= 0: none).
use constant START_GRACES => 3;

sub _start_grace {
    my ($self, $deadline) = @_;
    return 0 if $self->{answered} || !$self->{in} || $self->{graces} >= START_GRACES;
    return 0 if !CRSBridge::Load::working($self->{pid});
    $self->{graces}++;
    $self->{grace} += CRSBridge::Config::get('start-timeout');
    return $deadline + $self->{grace} - time;
}

# Reads the server's answer if it comes within POLL_SECONDS, while a CPU is free; false if none
# came. A round's answers come within a fraction of a millisecond, and a process that sleeps in
# select and is woken loses more than the wake-up (an idle CPU, a virtual one left to the host,
# cold caches): polling took a 3 x 30 HA round from 0.64 to 0.54 ms here, the server polling too
# (bridge/transport.py BriefPoll, which says why it polls only while no task waits for a CPU).
sub _poll {
    my ($self) = @_;
    CRSBridge::Load::cpu_free() or return 0;
    # A monotonic clock (Linux, where alone cpu_free lets this run): the wall clock set back
    # (NTP stepping it) would make the poll spin on. Read inline: a sub call would make each
    # turn, and so the time to notice the answer, a quarter longer (0.5 us, not 0.4).
    my $until = Time::HiRes::clock_gettime(MONOTONIC) + POLL_SECONDS;
    while (1) {
        my $n = sysread($self->{out}, $self->{rbuf}, 1 << 18, length $self->{rbuf});
        return 1 if $n;    # the answer, most often: _took has nothing to judge
        return $self->_took($n) if defined $n || $! != EAGAIN;    # (not %!: a tied hash, 4 times dearer)
        return 0 if Time::HiRes::clock_gettime(MONOTONIC) > $until;
    }
}

sub _write_ready {
    my ($self) = @_;
    # A dead server must give EPIPE here, not kill this process with SIGPIPE. (Blocking signals
    # around the write instead saves 0.5 us a write, 1 us a round, for an eval, two masks and a
    # caller's pending SIGPIPE lost: not worth it.)
    local $SIG{PIPE} = 'IGNORE';
    my $n = syswrite($self->{in}, $self->{wbuf});
    if (defined $n) {
        if ($n == length $self->{wbuf}) {
            $self->{wbuf} = '';    # all written: substr would copy bytes shared with the caller's string first
        } else {
            substr($self->{wbuf}, 0, $n, '');
        }
    } elsif (!$!{EAGAIN} && !$!{EWOULDBLOCK} && !$!{EINTR}) {
        $self->_fail('died', "writing to it failed: $!");
    }
    return;
}

sub _read_ready {
    my ($self) = @_;
    return $self->_took(sysread($self->{out}, $self->{rbuf}, 1 << 18, length $self->{rbuf}));
}

# Judges a sysread's result $n: fails on end of file or an error; true when bytes came.
sub _took {
    my ($self, $n) = @_;
    if (defined $n && $n == 0) {
        $self->{ended} = 1;
        $self->_fail('died', 'it closed its output');
    }
    if (!defined $n && !$!{EAGAIN} && !$!{EWOULDBLOCK} && !$!{EINTR}) {
        $self->_fail('died', "reading from it failed: $!");
    }
    return defined $n;
}

sub _fail {
    my ($self, $kind, $what) = @_;
    die CRSBridge::Process::Error->new($kind, $what);
}

=item log_hint()

Where the server's log went, for a message about its end: the last lines of the log file,
or where to look. (Its exit status is not known here: the server is no child of this process.)

=cut

# The log is appended to for as long as servers run, and a line can be megabytes: read only
# its end, and keep the message short.
use constant { LOG_TAIL_BYTES => 8192, LOG_TAIL_LINES => 5, LOG_LINE_CHARS => 300 };

sub log_hint {
    my ($self) = @_;
    my $log = $self->{log};
    return 'its log is in syslog, ident crs-bridge' if $log eq 'syslog';
    return 'its log went to stderr (to syslog, ident crs-bridge, when stderr is closed or /dev/null)'
        if $log eq 'stderr';
    open(my $fh, '<', $log) or return "see $log";
    local $.;    # seek: see LAST-READ HANDLE
    my $size = -s $fh // 0;
    seek($fh, $size - LOG_TAIL_BYTES, 0) if $size > LOG_TAIL_BYTES;
    read($fh, my $end, LOG_TAIL_BYTES) // return "see $log";
    my @lines = grep { /\S/ } split /\n/, $end;
    my @tail = @lines > LOG_TAIL_LINES ? @lines[ -LOG_TAIL_LINES .. -1 ] : @lines;
    for (@tail) {
        $_ = '...' . substr($_, -LOG_LINE_CHARS) if length > LOG_LINE_CHARS;
    }
    return "last lines of $log: " . join(' | ', @tail);
}

=item kill()

Kills the server (SIGKILL) unless it has closed its output already, and only when it can
prove the process is still the server (L<CRSBridge::SafeKill>: its pid may be another's once
it has died). Either way the pipes are closed: a server that still lives exits at the end of
its input or of this process.

=cut

sub kill {
    my ($self) = @_;
    local $!;
    CRSBridge::SafeKill::kill_server($self->{pid}, $self->{out}) if !$self->{ended};
    $self->{ended} = 1;
    $self->_close;
    return;
}

=item stop()

Stops the server cleanly: closes its input (it exits at end of input), waits up to two
seconds for it to close its output (reading what it still answers), then kills it.

=cut

sub stop {
    my ($self) = @_;
    close(delete $self->{in}) if $self->{in};
    $self->{wbuf} = '';
    my $deadline = time + STOP_SECONDS;
    while (!$self->{ended} && $self->{out} && time < $deadline) {
        $self->{rbuf} = '';
        last if !eval { $self->_wait($deadline); 1 };    # 'died' once the output is closed
    }
    if ($self->{ended}) {
        $self->_close;
    } else {
        $self->kill;
    }
    return;
}

=item abandon()

In a forked child: closes this process's copies of the pipes and leaves the server (which
belongs to the parent) alone.

=cut

sub abandon {
    my ($self) = @_;
    $self->{ended} = 1;
    $self->_close;
    return;
}

sub _close {
    my ($self) = @_;
    for my $fh (delete @$self{qw(in out)}) {
        close($fh) if $fh;
    }
    return;
}

package CRSBridge::Process::Error;

=back

=head1 CRSBridge::Process::Error

C<kind> is C<died> or C<timeout>; C<what> says what happened.

=cut

sub new {
    my ($class, $kind, $what) = @_;
    return bless { kind => $kind, what => $what }, $class;
}

sub kind { return $_[0]{kind} }
sub what { return $_[0]{what} }

1;
