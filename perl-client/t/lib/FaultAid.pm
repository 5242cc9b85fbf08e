package FaultAid;

# Helpers of the fault tests: watch processes that are not (or no longer) this test's children
# through /proc (Linux), collect orphaned servers as a child subreaper, and guard calls that
# must not block with a watchdog.

use strict;
use warnings;

use Exporter 'import';
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(process_state parent_pid cpu_ticks wait_gone become_subreaper watchdog);

=head1 FUNCTIONS

=over

=item process_state($pid)

The state letter of a process (R running, S sleeping, T stopped, Z zombie, ...) from
C</proc/$pid/stat>, or undef when there is no such process.

=cut

sub process_state {
    my ($pid) = @_;
    my $stat = _stat($pid) or return undef;
    return $stat->[0];
}

=item parent_pid($pid)

The parent process id of a process, or undef when there is no such process.

=cut

sub parent_pid {
    my ($pid) = @_;
    my $stat = _stat($pid) or return undef;
    return $stat->[1];
}

=item cpu_ticks($pid)

CPU time the process used so far (user plus system, in clock ticks), or undef when it is gone.

=cut

sub cpu_ticks {
    my ($pid) = @_;
    my $stat = _stat($pid) or return undef;
    return $stat->[11] + $stat->[12];
}

# Fields of /proc/PID/stat after the command name (state first).
sub _stat {
    my ($pid) = @_;
    open(my $fh, '<', "/proc/$pid/stat") or return undef;
    my $line = <$fh> // return undef;
    $line =~ s/^.*\) //s;    # the command name may contain spaces and parentheses
    return [ split ' ', $line ];
}

=item wait_gone($pid, $seconds)

Waits up to C<$seconds> for a process to end. Returns C<('reaped', $wait_status)> when it was
this process's child (or was re-parented to it as a subreaper) and ended, C<('gone')> or
C<('zombie')> when it ended and another process reaps it, or C<('running', $state)> when it
still runs after the wait.

=cut

sub wait_gone {
    my ($pid, $seconds) = @_;
    my $until = time + $seconds;
    while (1) {
        my $got = waitpid($pid, WNOHANG);
        return ('reaped', $?) if $got == $pid;
        my $state = process_state($pid);
        return ('gone') if !defined $state;
        # A zombie of ours may not be reapable yet: the leader of a process whose other threads
        # are still ending shows as one.
        return ('zombie') if $state eq 'Z' && (parent_pid($pid) // 0) != $$;
        return ('running', $state) if time > $until;
        sleep 0.02;
    }
}

=item become_subreaper()

Makes this process a child subreaper (Linux prctl PR_SET_CHILD_SUBREAPER), so that orphaned
descendants are re-parented to it and C<wait_gone> can collect their exit status. Returns
whether that worked.

=cut

sub become_subreaper {
    my $ok = eval {
        package main;    # syscall.ph defines its functions in the caller's package
        require 'syscall.ph';
        syscall(&main::SYS_prctl, 36, 1, 0, 0, 0) == 0;
    };
    return $ok ? 1 : 0;
}

=item watchdog($seconds, $what, sub { ... })

Runs the code and returns its result; dies with "C<$what> blocked" when it has not returned
after C<$seconds> (a test that would otherwise hang forever).

=cut

sub watchdog {
    my ($seconds, $what, $code) = @_;
    local $SIG{ALRM} = sub { die "watchdog: $what blocked for $seconds s\n" };
    alarm($seconds);
    my @result = eval { $code->() };
    my $error = $@;
    alarm(0);
    die $error if $error;
    return wantarray ? @result : $result[0];
}

=back

=cut

1;
