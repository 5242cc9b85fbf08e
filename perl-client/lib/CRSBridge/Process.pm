package CRSBridge::Process;

# One crs-bridge server process and the pipes to it: start, write and read lines with a
# deadline, stop. Knows nothing of JSON-RPC. Failures are thrown as CRSBridge::Process::Error
# objects whose kind ('start', 'died', 'timeout') tells the caller what to do next.

use strict;
use warnings;

use File::Spec;
use IPC::Open3 qw(open3);
use POSIX qw(WNOHANG);
use Text::ParseWords qw(shellwords);
use Time::HiRes qw(time sleep);

use constant F_SETPIPE_SZ => 1031;
use constant PIPE_SIZE => 1 << 20;

=head1 NAME

CRSBridge::Process - a crs-bridge server child process speaking line-framed messages

=head1 ENVIRONMENT

=over

=item CRS_BRIDGE_COMMAND

The command line that starts a server speaking crs-bridge's JSON-RPC on stdin/stdout, split
into words like a shell would (no shell is involved), e.g.
C</opt/crs-bridge/.venv/bin/crs-bridge serve --trace /tmp/crs.trace>. Default:
C<crs-bridge serve> with C<crs-bridge> looked up on C<PATH>.

=item CRS_BRIDGE_LOG

A file the server's stderr is appended to. Default: the server inherits this process's
stderr (it is never a pipe this client would have to drain).

=back

=head1 METHODS

=over

=item command()

The server command as a list of words, from C<CRS_BRIDGE_COMMAND> or C<PATH>. Dies with an
actionable message when C<crs-bridge> cannot be found.

=cut

sub command {
    my $line = $ENV{CRS_BRIDGE_COMMAND};
    if (defined $line && $line =~ /\S/) {
        return [ shellwords($line) ];
    }
    for my $dir (File::Spec->path) {
        my $path = File::Spec->catfile($dir eq '' ? '.' : $dir, 'crs-bridge');
        return [ File::Spec->rel2abs($path), 'serve' ] if -f $path && -x _;
    }
    die "crs-bridge: cannot start the server: 'crs-bridge' is not on PATH"
        . " (install it, or set CRS_BRIDGE_COMMAND to the command that runs 'crs-bridge serve')\n";
}

=item spawn()

Starts the server (C<command>) and returns the process object. Dies with a message saying
why when it cannot be started.

=cut

sub spawn {
    my ($class) = @_;
    my $cmd = command();
    my $log = $ENV{CRS_BRIDGE_LOG};
    my $err_fh;
    if (defined $log && $log ne '') {
        open($err_fh, '>>', $log)
            or die "crs-bridge: cannot open CRS_BRIDGE_LOG '$log' for appending: $!\n";
    } else {
        open($err_fh, '>&', \*STDERR) or open($err_fh, '>', File::Spec->devnull)
            or die "crs-bridge: cannot open a stderr for the server: $!\n";
    }
    my ($to_server, $from_server);
    my $pid = eval { open3($to_server, $from_server, '>&' . fileno($err_fh), @$cmd) };
    my $error = $@;
    close($err_fh);
    if (!$pid) {
        $error =~ s/ at \S+ line \d+.*//s;
        die "crs-bridge: cannot start the server '@$cmd': $error\n";
    }
    binmode($_) for $to_server, $from_server;
    $_->blocking(0) for $to_server, $from_server;
    # Linux: a 1 MiB pipe takes a whole round's batch in one write (F_SETPIPE_SZ; elsewhere a no-op).
    if ($^O eq 'linux') {
        fcntl($_, F_SETPIPE_SZ, PIPE_SIZE) for $to_server, $from_server;
    }
    return bless {
        pid => $pid, owner => $$, cmd => "@$cmd", log => $log,
        in => $to_server, out => $from_server, rbuf => '', wbuf => '', answered => 0,
    }, $class;
}

=item pid() / answered() / owner()

The server's process id; whether it has sent anything yet (a server that dies before its
first line failed to start); the pid of the Perl process that started it.

=cut

sub pid { return $_[0]{pid} }
sub answered { return $_[0]{answered} }
sub owner { return $_[0]{owner} }

=item queue($bytes)

Appends bytes to the outgoing buffer and writes what the pipe takes now, without waiting;
also takes in whatever the server has already answered, so it never blocks on a full pipe.

=cut

sub queue {
    my ($self, $bytes) = @_;
    if (length $self->{wbuf}) {
        $self->{wbuf} .= $bytes;
    } else {
        $self->{wbuf} = $bytes;    # no copy: the two share the bytes
    }
    $self->_write_ready if length $self->{wbuf};
    $self->_read_ready if $self->_readable(0);
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
        my $nl = index($self->{rbuf}, "\n");
        if ($nl >= 0) {
            my $line = substr($self->{rbuf}, 0, $nl + 1, '');
            chop $line;
            $self->{answered} = 1;
            return $line;
        }
        $self->_wait($deadline);
    }
}

sub _readable {
    my ($self, $timeout) = @_;
    my $bits = '';
    vec($bits, fileno($self->{out}), 1) = 1;
    return select($bits, undef, undef, $timeout) > 0;
}

sub _wait {
    my ($self, $deadline) = @_;
    my $left = $deadline - time;
    $self->_fail('timeout', 'no answer in time') if $left <= 0;
    my ($rbits, $wbits) = ('', '');
    vec($rbits, fileno($self->{out}), 1) = 1;
    vec($wbits, fileno($self->{in}), 1) = 1 if length $self->{wbuf};
    my $n = select(my $r = $rbits, my $w = $wbits, undef, $left);
    return if $n <= 0;    # timeout (checked on the next turn) or a signal
    $self->_write_ready if length $self->{wbuf} && vec($w, fileno($self->{in}), 1);
    $self->_read_ready if vec($r, fileno($self->{out}), 1);
    return;
}

sub _write_ready {
    my ($self) = @_;
    # A dead server must give EPIPE here, not kill this process with SIGPIPE.
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
    my $n = sysread($self->{out}, $self->{rbuf}, 1 << 18, length $self->{rbuf});
    $self->_fail('died', 'it closed its output') if defined $n && $n == 0;
    if (!defined $n && !$!{EAGAIN} && !$!{EWOULDBLOCK} && !$!{EINTR}) {
        $self->_fail('died', "reading from it failed: $!");
    }
    return;
}

sub _fail {
    my ($self, $kind, $what) = @_;
    die CRSBridge::Process::Error->new($kind, $what);
}

=item exit_description()

After the server died: reaps it (waiting up to a second) and describes how it ended
("exit status 1", "signal 9"); adds the tail of C<CRS_BRIDGE_LOG> when it is set.

=cut

sub exit_description {
    my ($self) = @_;
    local $?;
    my $how = 'it is still running';
    for (1 .. 100) {
        my $got = waitpid($self->{pid}, WNOHANG);
        if ($got == $self->{pid}) {
            $how = ($? & 127) ? 'killed by signal ' . ($? & 127) : 'exit status ' . ($? >> 8);
            $self->{signal} = $? & 127;
            $self->{reaped} = 1;
            last;
        }
        if ($got < 0) { $how = 'already reaped'; $self->{reaped} = 1; last }
        sleep 0.01;
    }
    return $how . $self->_log_tail;
}

=item killed()

After C<exit_description>: true when the server was ended by a signal (killed from outside,
e.g. by the OOM killer or an operator) rather than exiting by itself.

=cut

sub killed { return $_[0]{signal} ? 1 : 0 }

# The log is appended to for as long as servers run, and a line can be megabytes: read only
# its end, and keep the message short.
use constant { LOG_TAIL_BYTES => 8192, LOG_TAIL_LINES => 5, LOG_LINE_CHARS => 300 };

sub _log_tail {
    my ($self) = @_;
    return '; its error output went to stderr' if !defined $self->{log} || $self->{log} eq '';
    open(my $fh, '<', $self->{log}) or return "; see $self->{log}";
    my $size = -s $fh // 0;
    seek($fh, $size - LOG_TAIL_BYTES, 0) if $size > LOG_TAIL_BYTES;
    read($fh, my $end, LOG_TAIL_BYTES) // return "; see $self->{log}";
    my @lines = grep { /\S/ } split /\n/, $end;
    my @tail = @lines > LOG_TAIL_LINES ? @lines[ -LOG_TAIL_LINES .. -1 ] : @lines;
    for (@tail) {
        $_ = '...' . substr($_, -LOG_LINE_CHARS) if length > LOG_LINE_CHARS;
    }
    return "; last lines of $self->{log}: " . join(' | ', @tail);
}

=item kill()

Kills the server (SIGKILL) and reaps it.

=cut

sub kill {
    my ($self) = @_;
    local ($?, $!);
    CORE::kill('KILL', $self->{pid}) if !$self->{reaped};
    waitpid($self->{pid}, 0) if !$self->{reaped};
    $self->{reaped} = 1;
    $self->_close;
    return;
}

=item stop()

Stops the server cleanly: closes its input (it exits at end of input), waits up to two
seconds, then kills it.

=cut

sub stop {
    my ($self) = @_;
    local ($?, $!);
    $self->_close;
    return if $self->{reaped};
    for (1 .. 200) {
        my $got = waitpid($self->{pid}, WNOHANG);
        if ($got != 0) { $self->{reaped} = 1; return }
        sleep 0.01;
    }
    $self->kill;
    return;
}

=item abandon()

In a forked child: closes this process's copies of the pipes and leaves the server (which
belongs to the parent) alone.

=cut

sub abandon {
    my ($self) = @_;
    $self->{reaped} = 1;
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
