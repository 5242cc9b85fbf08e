#!/usr/bin/perl
# Server starts that go wrong. A server that dies while it starts (before its first answer:
# killed from outside, or slow to start on a loaded machine and killed meanwhile) is started
# once more, also when the call has already lost a server that had answered; the second start
# in a row that dies, or a second death after answering, ends the call with a clear message.
# Which start dies is chosen by a server command that counts its starts (t/bin/dies-starting),
# not by timing. A start still working when the start-timeout passes (a loaded machine) is
# given it again; a blocked one times out (t/bin/slow-start).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;

my $DIR = tempdir(CLEANUP => 1);
my @SERVER = @{ CRSBridge::Process::command() };
my ($DIES, $CRASH) = map {"$FindBin::Bin/bin/$_"} qw(dies-starting crash-proxy);

sub usage_object {
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node($_, 16, 64 * GiB) for qw(a b c);
    $usage->add_service("vm:$_", { stats => { maxcpu => $_, maxmem => $_ * GiB }, running => 1, 'current-node' => 'a' })
        for 1 .. 3;
    return $usage;
}

# How many times the server command of a test was started.
sub starts {
    my ($counter) = @_;
    open(my $fh, '<', $counter) or return 0;
    my $count = <$fh>;
    return 0 + ($count // 0);
}

# Kills the current server, if one runs (the next call starts one with the command of the test).
sub kill_server {
    my $pid = server_pid() // return;
    kill('KILL', $pid);
    return;
}

my $usage = usage_object();
my $expected = $usage->calculate_node_imbalance;
my $candidates = [ map { { leader => "vm:$_", resources => ["vm:$_"], nodes => [ 'b', 'c' ] } } 1 .. 3 ];

# The answer of $query (a code reference) on a new server started with the normal command:
# what a call through a faulty command must have answered. (Asked after that call: asked
# before, it would have been answered from memory, without a server.)
sub normal_answer {
    my ($query) = @_;
    kill_server();
    return $query->();
}

subtest 'the first start dies: started once more' => sub {
    my $counter = "$DIR/first";
    my $query = sub { $usage->score_nodes_to_start_service({ maxcpu => 1, maxmem => GiB }) };
    my $got = eval {
        local $ENV{CRS_BRIDGE_COMMAND} = join(' ', $DIES, $counter, 1, @SERVER);
        kill_server();
        $query->();
    } // "died: $@";
    is(starts($counter), 2, 'answered after a second start');
    is_deeply($got, normal_answer($query), 'as the normal server answers');
};

subtest 'a server that answered dies, and then its successor dies while it starts' => sub {
    # Start 1 restores the objects (it answers), then dies as the call's request comes; start 2
    # dies before answering; start 3 answers.
    my $counter = "$DIR/after-answer";
    my $query = sub { $usage->score_best_balancing_migration_candidates($candidates, 2) };
    my $got = eval {
        local $ENV{CRS_BRIDGE_COMMAND} = join(' ', $DIES, $counter, 2, $CRASH, 'once', "$DIR/crashed",
            'score_best_balancing_migration_candidates', @SERVER);
        kill_server();
        $query->();
    } // "died: $@";
    ok(-e "$DIR/crashed", 'the first new server died in the call');
    is(starts($counter), 3, 'answered after three starts');
    is_deeply($got, normal_answer($query), 'as the normal server answers');
};

subtest 'two starts in a row die: a clear message' => sub {
    my $counter = "$DIR/broken";
    local $ENV{CRS_BRIDGE_COMMAND} = join(' ', $DIES, $counter, '1,2,3,4', @SERVER);
    kill_server();
    like(error_of { $usage->score_nodes_to_start_service({ maxcpu => 2, maxmem => GiB }) },
        qr/^crs-bridge: cannot start the server '.*': it ended before answering \(.*\)\n\z/, 'cannot start');
    is(starts($counter), 2, 'after two starts');
};

subtest 'servers that keep dying after answering and while starting: bounded' => sub {
    # Odd starts answer the restore and die at the call, even starts die while starting.
    my $counter = "$DIR/bounded";
    local $ENV{CRS_BRIDGE_COMMAND} = join(' ', $DIES, $counter, '2,4,6,8', $CRASH, 'always', "$DIR/again",
        'score_best_balancing_migration_candidates_topsis', @SERVER);
    kill_server();
    like(error_of { $usage->score_best_balancing_migration_candidates_topsis($candidates, 1) },
        qr/^crs-bridge: the server died twice during scheduler\.score_best_balancing_migration_candidates_topsis /,
        'the second death after answering gives up');
    is(starts($counter), 3, 'after three starts');
};

# The graces _start_grace gave (seconds > 0 left after it), counted.
my $GRACES = 0;
{
    no warnings 'redefine';
    my $grace = \&CRSBridge::Process::_start_grace;
    *CRSBridge::Process::_start_grace = sub {
        my $left = $grace->(@_);
        $GRACES++ if $left > 0;
        return $left;
    };
}

subtest 'a start that works past the start-timeout is waited for' => sub {
    # It spins 4 s (working, as a start waiting for CPUs does), then starts the server: the
    # start-timeout of 3 s passes during the spin, and once more is given (up to 12 s in all).
    my $query = sub { $usage->score_nodes_to_start_service({ maxcpu => 3, maxmem => 2 * GiB }) };
    $GRACES = 0;
    my $got = eval {
        local $ENV{CRS_BRIDGE_COMMAND} = join(' ', "$FindBin::Bin/bin/slow-start", 'spin', 4, @SERVER);
        local $ENV{CRS_BRIDGE_START_TIMEOUT} = 3;
        kill_server();
        $query->();
    } // "died: $@";
    cmp_ok($GRACES, '>=', 1, 'the start-timeout was given again');
    is_deeply($got, normal_answer($query), 'and the call answered as the normal server answers');
};

subtest 'a start that is blocked times out at the start-timeout' => sub {
    $GRACES = 0;
    local $ENV{CRS_BRIDGE_COMMAND} = join(' ', "$FindBin::Bin/bin/slow-start", 'sleep', 60, @SERVER);
    local $ENV{CRS_BRIDGE_START_TIMEOUT} = 1;
    kill_server();
    like(error_of { $usage->score_nodes_to_start_service({ maxcpu => 4, maxmem => GiB }) },
        qr/^crs-bridge: cannot start the server '.*': no answer within 1 s \(limit set by CRS_BRIDGE_START_TIMEOUT\); killed it\n\z/,
        'cannot start, no answer in time');
    is($GRACES, 0, 'not given again');
};

kill_server();
is($usage->calculate_node_imbalance, $expected, 'a new server with the normal command: the object answers as before');

done_testing();
