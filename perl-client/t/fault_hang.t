#!/usr/bin/perl
# A hung server (alive, but no answer comes) never hangs the caller: the call dies with a
# message saying what happened and which setting sets the limit, the hung server is killed,
# and the next call works on a new server with every object restored. Hangs: stopped
# (SIGSTOP) as a request was sent; stopped while megabytes of buffered mutations
# still wait to be written; a server behind a proxy that stops relaying mid-call; a new
# server that stops while the objects are restored.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use FaultAid;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;

my $CLASS = 'PVE::RS::ResourceScheduling::Static';
my @SERVER = @{ CRSBridge::Process::command() };
my $DIR = tempdir(CLEANUP => 1);
my $SUBREAPER = become_subreaper();

# Stop the server (SIGSTOP) as a message matching $STOP_AT is written to it, or at the first
# write to a server that has not answered yet ($STOP_NEW, i.e. its restore). Stopped just
# before the write, so that it cannot answer first: the request arrives, no answer comes.
my ($STOP_AT, $STOP_NEW, $STOPPED);
{
    no warnings 'redefine';
    my $queue = \&CRSBridge::Process::queue;
    *CRSBridge::Process::queue = sub {
        my ($proc, $bytes) = @_;
        if (($STOP_AT && $bytes =~ $STOP_AT) || ($STOP_NEW && !$proc->answered)) {
            kill('STOP', $proc->pid);
            ($STOP_AT, $STOP_NEW, $STOPPED) = (undef, undef, $proc->pid);
        }
        return $queue->(@_);
    };
}

sub service {
    my ($node, $cores) = @_;
    return { stats => { maxcpu => $cores, maxmem => $cores * GiB }, running => 1, 'current-node' => $node };
}

sub build {
    my $usage = $CLASS->new();
    $usage->add_node($_, 16, 64 * GiB) for qw(a b c);
    $usage->add_service("vm:$_", service($_ <= 4 ? 'a' : 'b', $_)) for 1 .. 6;
    return $usage;
}

my @CANDIDATES;
for my $i (1 .. 6) {
    my $here = $i <= 4 ? 'a' : 'b';
    push @CANDIDATES, { leader => "vm:$i", resources => ["vm:$i"], nodes => [ grep { $_ ne $here } qw(a b c) ] };
}

my $usage = build();
my $twin = build();    # the same changes, never faulted: the expected answers
sub answers {
    my ($u) = @_;
    return [ $u->calculate_node_imbalance, $u->score_best_balancing_migration_candidates(\@CANDIDATES, 3),
        $u->score_nodes_to_start_service({ maxcpu => 2, maxmem => GiB }) ];
}

# A query that answers() does not ask, so the server must answer it (a query answers() asked is
# answered from memory in the same state, see CRSBridge::Connection::query).
sub unasked {
    my ($u) = @_;
    return $u->score_nodes_to_start_service({ maxcpu => 1, maxmem => GiB });
}

# The server is no child of the client: init reaps it (or this test, as a subreaper).
sub check_killed {
    my ($pid, $name) = @_;
    my ($how, $status) = wait_gone($pid, 20);
    like($how, qr/^(reaped|gone|zombie)$/, "$name: the hung server (pid $pid) was killed");
    is($status & 127, 9, "$name: ... by SIGKILL") if $how eq 'reaped';
}

subtest 'stopped as a request was sent' => sub {
    $_->add_service('vm:7', service('c', 3)) for $usage, $twin;    # buffered when the call starts
    my $expected = answers($twin);
    my $pid = server_pid();
    $STOP_AT = qr/"method":"scheduler\.score_nodes_to_start_service"/;
    local $ENV{CRS_BRIDGE_TIMEOUT} = 1;
    is(error_of { unasked($usage) },
        "crs-bridge: no answer from the server (pid $pid) within 1 s to scheduler.score_nodes_to_start_service;"
        . " killed it, the next call starts a new one and restores the scheduler objects (limit set by CRS_BRIDGE_TIMEOUT)\n",
        'the timeout fires with a clear message');
    is($STOPPED, $pid, 'the server had been stopped mid-call');
    check_killed($pid, 'mid-call');
    is_deeply(answers($usage), $expected, 'the next calls work, the buffered mutation included');
    isnt(server_pid(), $pid, '... on a new server');
};

subtest 'stopped while megabytes of mutations wait to be written' => sub {
    my $big = $CLASS->new();
    $big->add_node($_, 64, 256 * GiB) for qw(x y z);
    $big->calculate_node_imbalance;
    my $pid = server_pid();
    kill('STOP', $pid);
    my $count = 30_000;    # about 4 MB of requests: more than the pipe and the server's read take
    watchdog(60, 'buffering mutations for a stopped server', sub {
        $big->add_service("ct:$_", service(qw(x y z)[ $_ % 3 ], 1 + $_ % 2)) for 1 .. $count;
    });
    pass("$count mutations buffered without blocking");
    local $ENV{CRS_BRIDGE_TIMEOUT} = 1;
    like(watchdog(60, 'a query to a stopped server', sub { error_of { $big->calculate_node_imbalance } }),
        qr/^crs-bridge: no answer from the server \(pid $pid\) within 1 s to scheduler\.calculate_node_imbalance; killed it/,
        'the query times out');
    check_killed($pid, 'stopped');
    delete local $ENV{CRS_BRIDGE_TIMEOUT};
    my %sum;
    for my $i (1 .. $count) {
        my $node = qw(x y z)[ $i % 3 ];
        $sum{$node} += 1 + $i % 2;
    }
    my @nodes = map { [ $sum{$_}, 64, $sum{$_} * GiB, 256 * GiB ] } qw(x y z);
    cmp_ok(abs($big->calculate_node_imbalance - reference_imbalance(\@nodes, 'normalized')), '<', 1e-12,
        'the next call has all of them (replayed on a new server)');
    is_deeply(answers($usage), answers($twin), 'and the other objects are restored too');
};

subtest 'a server behind a proxy that stops relaying mid-call' => sub {
    my $expected = answers($twin);
    my $pidfile = "$DIR/hung-server.pid";
    {
        local $ENV{CRS_BRIDGE_COMMAND} = join(' ', "$FindBin::Bin/bin/hang-proxy", 'scheduler.score_nodes_to_start_service',
            $pidfile, @SERVER);
        local $ENV{CRS_BRIDGE_TIMEOUT} = 1;
        kill('KILL', server_pid());    # the next call starts the proxy
        like(error_of { unasked($usage) },
            qr/^crs-bridge: no answer from the server \(pid \d+\) within 1 s to scheduler\.score_nodes_to_start_service; killed it/,
            'the timeout fires');
    }
    open(my $fh, '<', $pidfile) or die "$pidfile: $!";
    chomp(my $server = <$fh>);
    my ($how, $status) = wait_gone($server, 20);
    like($how, qr/^(reaped|gone|zombie)$/, 'the server under the killed proxy ended by itself (end of its input)');
    is($status, 0, '... with exit status 0') if $how eq 'reaped';
    is_deeply(answers($usage), $expected, 'the next calls work');
};

subtest 'a new server that stops while the objects are restored' => sub {
    my $expected = answers($twin);
    kill('KILL', server_pid());
    $STOP_NEW = 1;
    local $ENV{CRS_BRIDGE_START_TIMEOUT} = 1;
    like(error_of { unasked($usage) },
        qr/^crs-bridge: cannot start the server '.*': no answer within 1 s \(limit set by CRS_BRIDGE_START_TIMEOUT\); killed it\n\z/,
        'the start timeout fires');
    check_killed($STOPPED, 'restoring');
    delete local $ENV{CRS_BRIDGE_START_TIMEOUT};
    is_deeply(answers($usage), $expected, 'the next calls work');
};

done_testing();
