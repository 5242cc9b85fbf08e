package CRSBridge::SafeKill;

use strict;
use warnings;

use POSIX ();

=head1 NAME

CRSBridge::SafeKill - SIGKILL to a server only while it is proved to be that server

=head1 DESCRIPTION

Once a server has died and init has reaped it, its process id may be another's (a guest's
QEMU, on a node), and that process must not be signalled. The server is no child of the
client (waitpid cannot tell whether it is gone), so the proof is this (Linux 5.3 and later): a
pidfd is taken on the server's pid, which stands for the process that had that pid then, never
for a later holder of it; then that pid is seen to hold the write end of the server's output
pipe (its read end is still open in the client, so no other pipe has its inode; a fork of the
client holds the read end only); then the signal goes through the pidfd. If the process of the
pidfd lives when the signal is sent, it lived when its descriptors were looked at, so it holds
the pipe: it is the server. If it has died meanwhile, the signal reaches nobody. Without pidfds
or F</proc>, or when the check fails, nothing is signalled.

=head1 FUNCTIONS

=over

=item kill_server($pid, $out)

Sends SIGKILL to process C<$pid> if it holds the write end of the pipe whose read end is the
open handle C<$out> (see above); true when the signal was sent, false otherwise (nothing sent).

=cut

# Linux system calls (the same numbers on every architecture but alpha); SIGKILL.
use constant { SYS_PIDFD_SEND_SIGNAL => 424, SYS_PIDFD_OPEN => 434, SIGKILL => 9 };

sub kill_server {
    my ($pid, $out) = @_;
    return 0 if $^O ne 'linux' || !$out;
    $pid = 0 + $pid;    # a number: syscall passes a string by its address
    my $pidfd = syscall(SYS_PIDFD_OPEN, $pid, 0);
    return 0 if $pidfd < 0;
    my $sent = _holds_write_end($pid, $out) && syscall(SYS_PIDFD_SEND_SIGNAL, $pidfd, SIGKILL, 0, 0) == 0;
    POSIX::close($pidfd);
    return $sent;
}

# Whether the process $pid has the write end of the pipe whose read end is $fh open (Linux: its
# /proc/PID/fd and fdinfo). The write end: a fork of the client holds the read end too.
sub _holds_write_end {
    my ($pid, $fh) = @_;
    my $pipe = 'pipe:[' . (stat $fh)[1] . ']';
    opendir(my $dh, "/proc/$pid/fd") or return 0;
    for my $fd (grep { /^\d+$/ } readdir $dh) {
        next if (readlink("/proc/$pid/fd/$fd") // '') ne $pipe;
        open(my $info, '<', "/proc/$pid/fdinfo/$fd") or next;
        sysread($info, my $text, 4096) or next;
        return 1 if $text =~ /^flags:\s*([0-7]+)/m && (oct($1) & POSIX::O_ACCMODE()) == POSIX::O_WRONLY();
    }
    return 0;
}

=back

=cut

1;
