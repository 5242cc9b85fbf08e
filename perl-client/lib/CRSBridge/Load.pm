package CRSBridge::Load;

use strict;
use warnings;

=head1 NAME

CRSBridge::Load - whether the machine has a CPU free, and whether a process is at work

=head1 DESCRIPTION

Linux only (C</proc>): elsewhere no CPU counts as free and no process as working, which makes
the callers take their plain way (sleep in select; no start grace). The client polls briefly
for an answer only while a CPU is free (L<CRSBridge::Process>), as the server does
(bridge/transport.py BriefPoll, which says why), and gives a starting server more time only
while that server works.

These functions read with C<sysseek>/readline on handles of their own under C<local $.>, so the
caller's last-read handle stays its own (see LAST-READ HANDLE in L<CRSBridge::Process>).

=head1 FUNCTIONS

=over

=cut

my ($LOADAVG, $CPUS);    # /proc/loadavg, kept open (undef: none), and the CPUs usable

=item watch()

Opens F</proc/loadavg> and counts the usable CPUs, once per process (later calls do nothing).
Called before the server's pipes are made, so that the file takes no descriptor 0 to 2.

=cut

sub watch {
    return if defined $CPUS;
    local $.;    # _cpu_list reads lines
    $CPUS = cpus_usable();
    open($LOADAVG, '<', '/proc/loadavg') or undef $LOADAVG;
    return;
}

=item cpu_free()

True while F</proc/loadavg> counts no more running tasks than usable CPUs (its fourth field,
"running/total", this process included); false without F</proc> or before C<watch>.

=cut

sub cpu_free {
    local $.;    # sysseek makes its handle the last-read one
    return 0 if !$LOADAVG || !sysseek($LOADAVG, 0, 0) || !sysread($LOADAVG, my $text, 128);
    my ($running) = $text =~ /^\S+ \S+ \S+ (\d+)\//;
    return defined $running && $running <= $CPUS;
}

=item cpus_usable()

The count of CPUs this process may run on (as the server counts them, bridge/transport.py
BriefPoll): its affinity (a container's cpuset, a taskset), which the server inherits, else
the CPUs online; 0 when unknown.

=cut

sub cpus_usable {
    my $allowed = _cpu_list('/proc/self/status', qr/^Cpus_allowed_list:\s*(\S+)/);
    return $allowed || _cpu_list('/sys/devices/system/cpu/online', qr/^(\S+)/);
}

# The count of CPUs in the list ("0-3,8-11") that $pattern captures from a line of $file; 0
# when there is none.
sub _cpu_list {
    my ($file, $pattern) = @_;
    open(my $fh, '<', $file) or return 0;
    my ($list) = map { $_ =~ $pattern ? $1 : () } <$fh>;
    my $count = 0;
    for my $range (split /,/, $list // '') {
        my ($first, $last) = $range =~ /^(\d+)(?:-(\d+))?/ or next;
        $count += ($last // $first) - $first + 1;
    }
    return $count;
}

=item working($pid)

Whether process C<$pid> is running, runnable or waiting for the disk (state R or D in
F</proc/PID/stat>); false when it is stopped, sleeping, gone, or without F</proc>.

=cut

sub working {
    my ($pid) = @_;
    open(my $fh, '<', "/proc/$pid/stat") or return 0;
    sysread($fh, my $stat, 4096) or return 0;
    return $stat =~ /.*\) ([RD]) /s;    # (after the last parenthesis: the command name may hold some)
}

=back

=cut

1;
