#!/usr/bin/perl
# Writing to the server (CRSBridge::Process): a server that no longer reads (its input closed)
# makes the write fail as a 'died' error, never kills the caller with SIGPIPE, calls none of
# the caller's SIGPIPE handler, and leaves the caller's signal mask and dispositions as they
# were, with no SIGPIPE left pending; a write the pipe cannot take whole returns at once and is
# finished later; a server blocked on answers nobody reads yet is no deadlock.
#
# The servers are stand-ins (perl one-liners as the 'command' setting): each case controls what
# the server reads and when.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempfile);
use Test::More;
use CRSBridge::Process;

my $LIB = "$FindBin::Bin/../lib";

# A stand-in server running the Perl code $code (no single quotes in it).
sub stand_in {
    my ($code) = @_;
    $ENV{CRS_BRIDGE_COMMAND} = "$^X -e '$code'";
    return CRSBridge::Process->spawn;
}

sub far { return time + 30 }

# In a child process (so that a SIGPIPE that got through shows as its death, not this test's):
# with SIGUSR1 blocked by the caller and a SIGPIPE handler of its own, write to a server that
# has closed its input. The child reports what it saw on its stdout.
my $CHILD = <<'PERL';
use strict;
use warnings;
use POSIX ();
use CRSBridge::Process;
$| = 1;
$ENV{CRS_BRIDGE_COMMAND} = qq($^X -e 'close(STDIN); \$| = 1; print "closed\\n"; sleep 30');
my $handled = 0;
$SIG{PIPE} = sub { $handled++ };
my $before = POSIX::SigSet->new(POSIX::SIGUSR1());
POSIX::sigprocmask(POSIX::SIG_BLOCK(), $before);
my $p = CRSBridge::Process->spawn;
print 'server: ', $p->read_line(time + 30), "\n";
for my $try (1 .. 2) {
    my $ok = eval { $p->queue("x" x 100 . "\n"); 1 };
    my $e = $@;
    print "write $try: ", ($ok ? 'no error' : ref $e ? $e->kind . ': ' . $e->what : "die: $e"), "\n";
}
my ($mask, $pending) = (POSIX::SigSet->new, POSIX::SigSet->new);
POSIX::sigprocmask(POSIX::SIG_BLOCK(), POSIX::SigSet->new, $mask);
POSIX::sigpending($pending);
print 'blocked: ', join(',', grep { $mask->ismember(POSIX->can("SIG$_")->()) } qw(USR1 PIPE ALRM TERM INT CHLD)), "\n";
print 'pipe pending: ', ($pending->ismember(POSIX::SIGPIPE()) ? 1 : 0), "\n";
print "handler called: $handled\n";
print 'handler kept: ', (ref $SIG{PIPE} eq 'CODE' ? 1 : 0), "\n";
$p->kill;
PERL

subtest 'a server that closed its input: an error, no SIGPIPE, the caller as it was' => sub {
    my ($fh, $script) = tempfile(UNLINK => 1);
    print {$fh} $CHILD;
    close($fh);
    my $out = qx($^X -I$LIB $script);
    is($?, 0, 'the writing process lives on (not killed by SIGPIPE)');
    like($out, qr/^server: closed$/m, 'the server had closed its input');
    like($out, qr/^write 1: died: writing to it failed: Broken pipe$/m, 'the write fails as died, saying why');
    like($out, qr/^write 2: died: writing to it failed: Broken pipe$/m, 'and again');
    like($out, qr/^blocked: USR1$/m, "the caller's signal mask is as it was");
    like($out, qr/^pipe pending: 0$/m, 'no SIGPIPE is left pending');
    like($out, qr/^handler called: 0$/m, "the caller's SIGPIPE handler was not called");
    like($out, qr/^handler kept: 1$/m, "the caller's SIGPIPE handler is still set");
};

subtest 'a line the pipe cannot take whole: queue returns, read_line finishes the write' => sub {
    my $p = stand_in('$| = 1; print "ready\n"; my $l = <STDIN>; print length($l), "\n"');
    is($p->read_line(far()), 'ready', 'the server runs');
    kill('STOP', $p->pid);    # it reads nothing now: the write comes up short
    my $line = 'y' x (3 << 20) . "\n";
    $p->queue($line);
    ok(length $p->{wbuf}, 'queue returned with bytes still to write');
    kill('CONT', $p->pid);
    is($p->read_line(far()), length $line, 'the server got the whole line');
    $p->kill;
};

subtest 'a server blocked on answers not yet read reads on once they are' => sub {
    # Requests and answers of 100 KB, 4 MB each way: the server blocks on its output pipe, stops
    # reading, and the client's writes come up short (queue then takes in what has arrived).
    my $p = stand_in('$| = 1; while (my $l = <STDIN>) { chomp $l; print $l, "z" x 100000, "\n" }');
    $p->queue("$_" . 'r' x 100000 . "\n") for 1 .. 40;
    my @ok = grep { $p->read_line(far()) eq "$_" . 'r' x 100000 . 'z' x 100000 } 1 .. 40;
    is(scalar @ok, 40, 'every answer came, in order');
    $p->kill;
};

done_testing();
