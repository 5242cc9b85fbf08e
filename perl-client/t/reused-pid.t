#!/usr/bin/perl
# The client never signals a process it cannot prove is still its own server. After the server
# died and was reaped, its pid may be another process's: the next call finds the server gone,
# starts a new one and answers, and the process now holding the old pid lives on.
#
# With a real reused pid (root: a private pid namespace, whose ns_last_pid hands the dead
# server's pid to a bystander), and without root: the process object pointed at a bystander's
# pid, as it would be after a reuse; a stopped (hung) server is still killed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Spec;
use Test::More;
use CRSBridgeTest;
use FaultAid;
use CRSBridge::Connection;
use PVE::RS::ResourceScheduling::Static;

my $LIB = "$FindBin::Bin/../lib";

sub usage_object {
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node($_, 16, 64 * GiB) for qw(a b);
    $usage->add_service('vm:1', { stats => { maxcpu => 1, maxmem => GiB }, running => 1, 'current-node' => 'a' });
    return $usage;
}

# A child of ours that sleeps: a process that is not the server.
sub bystander {
    my $pid = fork() // die "fork: $!\n";
    if (!$pid) {
        exec('sleep', '30') or POSIX::_exit(127);
    }
    return $pid;
}

# The signal that ends our child $pid once we send it SIGTERM: 15 if nobody signalled it
# before (a SIGKILL sent earlier makes it end by that, whenever it runs).
sub ending_signal {
    my ($pid) = @_;
    kill('TERM', $pid);
    waitpid($pid, 0);
    return $? & 127;
}

subtest 'kill spares a process that is not the server' => sub {
    my $usage = usage_object();
    $usage->calculate_node_imbalance;
    my $connection = CRSBridge::Connection->instance;
    my $proc = $connection->{proc};
    my $other = bystander();
    {
        local $proc->{pid} = $other;    # the server's pid, as if reused by the bystander
        $proc->kill;
    }
    is(ending_signal($other), 15, 'the bystander was not signalled');
    delete $connection->{proc};    # (the server ends at the end of its input)
};

subtest 'a hung server is still killed' => sub {
    my $usage = usage_object();
    $usage->calculate_node_imbalance;
    my $proc = CRSBridge::Connection->instance->{proc};
    my $server = $proc->pid;
    kill('STOP', $server);
    $proc->kill;
    delete CRSBridge::Connection->instance->{proc};
    my ($how) = wait_gone($server, 10);
    isnt($how, 'running', 'the stopped server is gone');
    kill('KILL', $server) if $how eq 'running';    # (a failure must not leave it behind)
    is(usage_object()->calculate_node_imbalance, $usage->calculate_node_imbalance, 'the next call works');
};

# The real reuse: run as pid 1 of a private pid namespace (which reaps the orphaned server).
my $PROGRAM = <<'PERL';
use strict; use warnings;
use POSIX ();
use PVE::RS::ResourceScheduling::Static;
die "not pid 1 of a pid namespace\n" if $$ != 1;
my $u = PVE::RS::ResourceScheduling::Static->new;
$u->add_node('a', 16, 2**36); $u->add_node('b', 16, 2**36);
$u->add_service('vm:1', { stats => { maxcpu => 1, maxmem => 2**30 }, running => 1, 'current-node' => 'a' });
$u->calculate_node_imbalance;
my $pid = CRSBridge::Connection->instance->server_pid;
kill 'KILL', $pid; waitpid($pid, 0);    # the server dies (OOM killer, an admin) and is reaped
open(my $fh, '>', '/proc/sys/kernel/ns_last_pid') or die "ns_last_pid: $!\n"; print $fh $pid - 1; close $fh;
my $bystander = fork() // die "fork: $!\n";
exec('sleep', '30') or POSIX::_exit(127) if !$bystander;
print "reused ", ($bystander == $pid ? 1 : 0), "\n";
my $r = $u->score_best_balancing_migration_candidates([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }], 1);
print "answered $r->[0]{migration}{'target-node'}\n";
kill 'TERM', $bystander; waitpid($bystander, 0);    # a SIGKILL sent before would end it first
print "bystander ended by signal ", $? & 127, "\n";
PERL

SKIP: {
    skip 'a reused pid needs root (a private pid namespace)', 3 if $> != 0;
    my ($unshare) = grep { -x } map { File::Spec->catfile($_, 'unshare') } File::Spec->path, '/usr/bin';
    skip 'unshare (util-linux) is not installed', 3 if !$unshare;
    open(my $out, '-|', $unshare, '--pid', '--fork', '--mount-proc', $^X, "-I$LIB", '-e', $PROGRAM)
        or die "cannot run unshare: $!\n";
    my $said = do { local $/; <$out> } // '';
    close($out);
    skip "unshare could not make a pid namespace here: $said", 3 if $said !~ /^reused/;
    like($said, qr/^reused 1$/m, 'the bystander got the dead server\'s pid');
    like($said, qr/^answered b$/m, 'the call after the death was answered by a new server');
    like($said, qr/^bystander ended by signal 15$/m, 'the bystander was not signalled (our SIGTERM ended it)');
}

done_testing();
