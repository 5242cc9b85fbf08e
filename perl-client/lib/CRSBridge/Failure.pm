package CRSBridge::Failure;

use strict;
use warnings;

use Time::HiRes qw(time);

use CRSBridge::Config;

=head1 NAME

CRSBridge::Failure - how long the client waits for the server, and what a failed server means

=head1 DESCRIPTION

A call waits for its answer at most C<timeout> seconds, a new server's first answer at most
C<start-timeout> (it starts; L<CRSBridge::Config>). A server that misses that, or ends, is
killed by the connection (L<CRSBridge::Connection>), which then retries the call on a new
server or dies with the message worded here.

=head1 FUNCTIONS

=over

=item limits()

C<(timeout, start-timeout)>, in seconds; dies for a bad setting (before anything is sent).

=cut

sub limits {
    return (CRSBridge::Config::get('timeout'), CRSBridge::Config::get('start-timeout'));
}

=item deadline($proc)

The time (epoch seconds) by which the next answer of C<$proc> (L<CRSBridge::Process>) is due.

=cut

sub deadline {
    my ($proc) = @_;
    return time + CRSBridge::Config::get(_limit_key($proc));
}

# The setting that limits the wait for an answer of $proc: a new server's first answer may take
# longer (it starts).
sub _limit_key {
    my ($proc) = @_;
    return $proc->answered ? 'timeout' : 'start-timeout';
}

=item judge($proc, $error, $method, $deaths)

For the killed server C<$proc>, which failed with C<$error> (a C<CRSBridge::Process::Error>)
during C<$method>: dies saying why when it hung, or when the call gives up (C<gives_up>);
returns when the call is to be retried on a new server. C<$deaths> is the call's count of the
deaths of servers it started (a hash, empty at first), false for a server the call did not
start: one that was already running may have died any time before, and is always replaced.

=cut

sub judge {
    my ($proc, $error, $method, $deaths) = @_;
    my $limit = CRSBridge::Config::get(_limit_key($proc));
    my ($pid, $cmd) = ($proc->pid, $proc->command_line);
    if ($error->kind eq 'timeout') {
        my $origin = CRSBridge::Config::origin(_limit_key($proc));
        die "crs-bridge: no answer from the server (pid $pid) within $limit s to $method; "
            . "killed it, the next call starts a new one and restores the scheduler objects (limit $origin)\n"
            if $proc->answered;
        die "crs-bridge: cannot start the server '$cmd': no answer within $limit s (limit $origin); killed it\n";
    }
    return if !$deaths || !gives_up($proc, $deaths);    # retry: a new server, the objects restored
    die "crs-bridge: cannot start the server '$cmd': it ended before answering (" . $proc->log_hint . ")\n"
        if !$proc->answered;
    die "crs-bridge: the server died twice during $method (" . $proc->log_hint . "); giving up on this call\n";
}

=item gives_up($proc, $deaths)

Whether a call gives up after the death of C<$proc>, a server it started, given the earlier
deaths of such servers (C<%$deaths>, which this counts). A server that dies while it starts
(before its first answer: killed from outside, slow to start on a loaded machine) is started
once more, and so is one that dies after answering; the second start in a row that dies (a
broken command or installation) or the second death after answering gives up. A call so
starts at most four servers.

=cut

sub gives_up {
    my ($proc, $deaths) = @_;
    if ($proc->answered) {
        $deaths->{start} = 0;
        return $deaths->{answered}++ > 0;
    }
    return $deaths->{start}++ > 0;
}

=back

=cut

1;
