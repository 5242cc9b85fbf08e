#!/usr/bin/perl
# A server killed (SIGKILL) at random points of an HA-like session is invisible to the caller:
# no error, and every answer identical to the same session without kills.
#
# The session: every round the "CRM" rebuilds a Static and a Dynamic object from a simulated
# cluster (nodes, then guests, some mid-migration), queries them (imbalance, migration scores,
# start scores, the extras), removes a guest and a node, queries again and provokes one
# semantic error; two long-lived objects get a few mutations and queries per round, so their
# journals grow across many servers. Between rounds guests migrate and their usage drifts.
#
# Kill points, one per round, cycling through: between calls (mutations may be buffered);
# right after a write to the server (a batch or a request has been sent, no answer read); right
# after an answer was read (more answers pending); during the restore of a new server (after a
# kill between calls, so two servers die in one call); and at a random moment by a timer signal.
#
# CRS_BRIDGE_FAULT_KILLS sets the number of kills (default 10; 100 for the full run, about a
# minute: each kill costs a server start-up), CRS_BRIDGE_FAULT_SEED the seed (default: random,
# printed).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use Time::HiRes qw(ualarm);
use CRSBridgeTest;
use CRSBridge::Connection;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

my $KILLS = $ENV{CRS_BRIDGE_FAULT_KILLS} // 10;
die "CRS_BRIDGE_FAULT_KILLS must be a positive integer, got '$KILLS'\n" if $KILLS !~ /^[1-9]\d*$/;
my $SEED = $ENV{CRS_BRIDGE_FAULT_SEED} // int(rand(1_000_000));
note("CRS_BRIDGE_FAULT_SEED=$SEED CRS_BRIDGE_FAULT_KILLS=$KILLS");

my @KINDS = qw(between write read restore timer);
my @NODES = map { "node$_" } 1 .. 5;

# -- the simulated cluster, round by round ----------------------------------------------------

# Snapshots of the cluster for $count rounds: nodes (capacities, measured base load) and
# guests (node, target while migrating, limits, measured usage).
sub cluster_rounds {
    my ($count) = @_;
    my %nodes = map {
        my $i = $_;
        ("node$i" => { maxcpu => 8 * (1 + $i % 3), maxmem => (16 << ($i % 3)) * GiB, cpu => 0.25 * $i, mem => $i * GiB })
    } 1 .. 5;
    my %guests = map {
        ("vm:$_" => { node => $NODES[ int rand 2 ], maxcpu => 1 + int rand 4, maxmem => (1 + int rand 8) * GiB,
            cpu => rand 2, mem => int(rand 4 * GiB) })
    } 100 .. 139;
    my @rounds;
    for (1 .. $count) {
        for my $g (values %guests) {    # migrations of the last round are done
            $g->{node} = delete $g->{target} if $g->{target};
        }
        my @sids = sort keys %guests;
        for my $sid (map { $sids[ int rand @sids ] } 1 .. 3) {
            my $g = $guests{$sid};
            $g->{node} = $NODES[ int rand @NODES ];
            $g->{cpu} = rand $g->{maxcpu};
            $g->{mem} = int(rand $g->{maxmem});
        }
        my $moving = $guests{ $sids[ int rand @sids ] };
        my @others = grep { $_ ne $moving->{node} } @NODES;
        $moving->{target} = $others[ int rand @others ];
        push @rounds, { nodes => { map { ($_ => { %{ $nodes{$_} } }) } @NODES },
            guests => { map { ($_ => { %{ $guests{$_} } }) } @sids } };
    }
    return \@rounds;
}

# HA's candidates: one bundle per stationary guest, to every other node; the first two guests
# on node1 form one bundle (affinity).
sub candidates {
    my ($guests) = @_;
    my @stationary = grep { !$guests->{$_}{target} } sort keys %$guests;
    my @pair = grep { $guests->{$_}{node} eq 'node1' } @stationary;
    @pair = () if @pair < 2;
    my %in_pair = map { ($_ => 1) } @pair[ 0, 1 ];
    my @bundles;
    push @bundles, { leader => $pair[0], resources => [ @pair[ 0, 1 ] ], nodes => [ grep { $_ ne 'node1' } @NODES ] } if @pair;
    for my $sid (grep { !$in_pair{$_} } @stationary) {
        push @bundles, { leader => $sid, resources => [$sid], nodes => [ grep { $_ ne $guests->{$sid}{node} } @NODES ] };
    }
    return \@bundles;
}

# -- the session: a list of operations per round ----------------------------------------------

# Operations of one round: [label, server contact (1: it sends a query), code]. Every random
# choice is made here, so both runs do exactly the same.
sub round_ops {
    my ($r, $cluster, $long) = @_;
    my ($nodes, $guests) = @$cluster{qw(nodes guests)};
    my $cands = candidates($guests);
    my @ops;
    my $op = sub { push @ops, [ "round $r: $_[0]", $_[1], $_[2] ] };

    $op->('new objects', 1, sub {
        my ($c) = @_;
        $c->{S} = PVE::RS::ResourceScheduling::Static->new();
        $c->{D} = PVE::RS::ResourceScheduling::Dynamic->new();
        return;
    });
    $op->('add nodes', 0, sub {
        my ($c) = @_;
        for my $name (@NODES) {
            my $n = $nodes->{$name};
            $c->{S}->add_node($name, $n->{maxcpu}, $n->{maxmem});
            $c->{D}->add_node($name, { cpu => $n->{cpu}, maxcpu => $n->{maxcpu}, mem => $n->{mem}, maxmem => $n->{maxmem} });
        }
        return;
    });
    $op->('add guests', 0, sub {
        my ($c) = @_;
        for my $sid (sort keys %$guests) {
            my $g = $guests->{$sid};
            my %placement = ('current-node' => $g->{node}, 'target-node' => $g->{target});
            $c->{S}->add_service($sid, { stats => { maxcpu => $g->{maxcpu}, maxmem => $g->{maxmem} }, running => 1, %placement });
            $c->{D}->add_resource($sid, { stats => { cpu => $g->{cpu}, maxcpu => $g->{maxcpu}, mem => $g->{mem},
                maxmem => $g->{maxmem} }, running => 1, %placement });
        }
        return;
    });
    $op->('static imbalance', 1, sub { $_[0]{S}->calculate_node_imbalance });
    $op->('dynamic imbalance', 1, sub { $_[0]{D}->calculate_node_imbalance });
    $op->('static scores', 1, sub { $_[0]{S}->score_best_balancing_migration_candidates($cands, 2) });
    $op->('dynamic topsis', 1, sub { $_[0]{D}->score_best_balancing_migration_candidates_topsis($cands, 2) });
    my $start = { maxcpu => 2, maxmem => 2 * GiB };
    $op->('static start', 1, sub { $_[0]{S}->score_nodes_to_start_service($start) });
    $op->('dynamic start', 1, sub { $_[0]{D}->score_nodes_to_start_resource({ %$start, cpu => 1.5, mem => GiB }) });
    $op->('dynamic select', 1, sub { $_[0]{D}->select_best_balancing_migration($cands, 0.05) });
    $op->('static plan', 1, sub { $_[0]{S}->plan_rebalance($cands, { max_steps => 2 }) });
    my @sids = sort keys %$guests;
    my ($gone, $gone_too) = map { $sids[ int rand @sids ] } 1, 2;
    my $node = $NODES[ 1 + int rand 4 ];
    $op->("remove $gone, $gone_too, $node", 0, sub {
        my ($c) = @_;
        $c->{S}->remove_service_usage($gone);
        $c->{D}->remove_resource($gone_too);
        $c->{S}->remove_node($node);
        return [ $c->{S}->list_nodes, $c->{S}->contains_node($node) ];
    });
    $op->('duplicate node', 0, sub { $_[0]{D}->add_node('node1', { cpu => 0, maxcpu => 1, mem => 0, maxmem => 1 }) });
    my $left = [ grep { !grep { $_ eq $gone_too } @{ $_->{resources} } } @$cands ];
    $op->('static imbalance again', 1, sub { $_[0]{S}->calculate_node_imbalance });
    $op->('dynamic scores again', 1, sub { $_[0]{D}->score_best_balancing_migration_candidates($left, 3) });

    # The long-lived objects: a node and three guests come, older ones go.
    my $extra = { cpu => rand 2, maxcpu => 4, mem => int(rand GiB), maxmem => 8 * GiB };
    my @added = map { [ "ct:$r:$_", $NODES[ int rand @NODES ], 1 + int rand 3, (1 + int rand 4) * GiB ] } 1 .. 3;
    $long->{"ct:$r:$_"} = $added[ $_ - 1 ][1] for 1 .. 3;
    my @removed = $r > 2 ? ("ct:" . ($r - 2) . ":1") : ();
    delete $long->{$_} for @removed;
    my $long_cands = [];
    for my $sid (grep { defined $long->{$_} } map { "ct:" . ($r - 1) . ":$_" } 1 .. 3) {
        push @$long_cands, { leader => $sid, resources => [$sid], nodes => [ grep { $_ ne $long->{$sid} } @NODES ] };
    }
    $op->('long-lived changes', $r == 1, sub {
        my ($c) = @_;
        if (!$c->{LS}) {
            ($c->{LS}, $c->{LD}) = (PVE::RS::ResourceScheduling::Static->new(), PVE::RS::ResourceScheduling::Dynamic->new());
            for my $name (@NODES) {
                $c->{LS}->add_node($name, 16, 64 * GiB);
                $c->{LD}->add_node($name, { cpu => 1, maxcpu => 16, mem => GiB, maxmem => 64 * GiB });
            }
        }
        $c->{LS}->add_node("extra$r", $extra->{maxcpu}, $extra->{maxmem});
        $c->{LD}->add_node("extra$r", $extra);
        $c->{LS}->remove_node("extra" . ($r - 3));
        $c->{LD}->remove_node("extra" . ($r - 1));
        for my $a (@added) {
            my ($sid, $at, $cpu, $mem) = @$a;
            $c->{LS}->add_service($sid, { stats => { maxcpu => $cpu, maxmem => $mem }, running => 1, 'current-node' => $at });
            $c->{LD}->add_resource($sid, { stats => { cpu => $cpu / 2, maxcpu => $cpu, mem => $mem / 2, maxmem => $mem },
                running => 1, 'current-node' => $at });
        }
        $c->{LS}->remove_service_usage($_) for @removed;
        $c->{LD}->remove_resource($_) for @removed;
        return;
    });
    $op->('long-lived static imbalance', 1, sub { $_[0]{LS}->calculate_node_imbalance });
    $op->('long-lived dynamic scores', 1, sub { $_[0]{LD}->score_best_balancing_migration_candidates($long_cands, 5) });
    return \@ops;
}

# -- killing the server -----------------------------------------------------------------------

my %KILLED;             # pid -> 1 for every server this test killed
my %FIRED = map { ($_ => 0) } @KINDS;
my %FELL_BACK = map { ($_ => 0) } @KINDS;    # in-call kills that found no moment in their call
my $ARMED;              # { kind => write|read|restore, nth, count, fired } during one operation
my $SPAWNED = 0;

sub kill_server {
    my ($pid) = @_;
    $pid //= server_pid();
    return 0 if !$pid || $KILLED{$pid};
    kill('KILL', $pid) or return 0;
    return $KILLED{$pid} = 1;
}

# Kill the server from inside the client's own I/O: right after the nth write or read of an
# operation, or at the first write to a server that has not answered yet (its restore).
sub fire {
    my ($proc, $event) = @_;
    return if !$ARMED || $ARMED->{fired};
    if ($ARMED->{kind} eq 'restore') {
        return if $event ne 'write' || $proc->answered;
    } else {
        return if $event ne $ARMED->{kind} || ++$ARMED->{count} < $ARMED->{nth};
    }
    $ARMED->{fired} = kill_server($proc->pid);
    return;
}

{
    no warnings 'redefine';
    my ($queue, $read_line, $spawn) = (\&CRSBridge::Process::queue, \&CRSBridge::Process::read_line, \&CRSBridge::Process::spawn);
    *CRSBridge::Process::queue = sub { $queue->(@_); fire($_[0], 'write'); return };
    *CRSBridge::Process::read_line = sub { my $line = $read_line->(@_); fire($_[0], 'read'); return $line };
    *CRSBridge::Process::spawn = sub { $SPAWNED++; return $spawn->(@_) };
}

# One kill per round: its kind (cycling), the operation it aims at and the details.
sub kill_plan {
    my ($rounds, $ops_per_round) = @_;
    my @plan;
    my $offset = int rand @KINDS;
    for my $r (0 .. $rounds - 1) {
        my $ops = $ops_per_round->[$r];
        my $kind = $KINDS[ ($r + $offset) % @KINDS ];
        my @eligible = $kind eq 'between' ? (0 .. $#$ops) : grep { $ops->[$_][1] } 0 .. $#$ops;
        # Calls take 0.1 to 2 ms (median 0.7): the timer's delay (microseconds) lands in most.
        push @plan, { kind => $kind, op => $eligible[ int rand @eligible ], nth => rand() < 0.7 ? 1 : 2,
            delay => 20 + int rand 700 };
    }
    return \@plan;
}

# Runs the operations; with a plan, kills as planned until $kills servers died. Returns the
# trace ([label, answer or "died: error"] per operation) and the number of rounds run.
sub run_session {
    my ($ops_per_round, $plan, $kills) = @_;
    my (%objects, @trace);
    my $rounds = 0;
    for my $r (0 .. $#$ops_per_round) {
        last if $plan && scalar(keys %KILLED) >= $kills;
        $rounds++;
        my $ops = $ops_per_round->[$r];
        for my $i (0 .. $#$ops) {
            my $kill = $plan && $plan->[$r]{op} == $i ? $plan->[$r] : undef;
            my $before = scalar keys %KILLED;
            arm($kill) if $kill;
            my $answer = eval { $ops->[$i][2]->(\%objects) };
            push @trace, [ $ops->[$i][0], $@ ? "died: $@" : $answer ];
            disarm($kill) if $kill;
            $FIRED{ $kill->{kind} } += scalar(keys %KILLED) - $before if $kill;
        }
    }
    %objects = ();
    return (\@trace, $rounds);
}

sub arm {
    my ($kill) = @_;
    my $kind = $kill->{kind};
    if ($kind eq 'between' || $kind eq 'restore') {
        kill_server();
        $ARMED = { kind => 'restore' } if $kind eq 'restore';
    } elsif ($kind eq 'timer') {
        my $armed = $ARMED = { kind => 'timer' };
        my $pid = server_pid();
        $SIG{ALRM} = sub { $armed->{fired} = kill_server($pid) };
        ualarm($kill->{delay});
    } else {
        $ARMED = { kind => $kind, nth => $kill->{nth}, count => 0 };
    }
    return;
}

# After the operation: a kill that found no moment inside it happens now, between calls.
sub disarm {
    my ($kill) = @_;
    ualarm(0) if $kill->{kind} eq 'timer';
    $SIG{ALRM} = 'DEFAULT';
    my $fired = !$ARMED || $ARMED->{fired};
    $ARMED = undef;
    $FELL_BACK{ $kill->{kind} } += kill_server() if !$fired;
    return;
}

sub live_handles {
    return CRSBridge::Connection->instance->call(undef, 'bridge.info', '{}')->{schedulers};
}

# -- the test ---------------------------------------------------------------------------------

srand($SEED);
my $max_rounds = 2 * $KILLS + 2;
my $clusters = cluster_rounds($max_rounds);
my %long;
my @ops_per_round = map { round_ops($_ + 1, $clusters->[$_], \%long) } 0 .. $max_rounds - 1;
my $plan = kill_plan($max_rounds, \@ops_per_round);

PVE::RS::ResourceScheduling::Static->new();    # the first server, before anything is counted
my $first_server = server_pid();
$SPAWNED = 0;
my ($with_kills, $rounds) = run_session(\@ops_per_round, $plan, $KILLS);
is(live_handles(), 0, 'after the session every object was freed on the server');
my $kills = keys %KILLED;
cmp_ok($kills, '>=', $KILLS, "$kills kills in $rounds rounds") or diag("seed $SEED");
is($SPAWNED, $kills, 'one new server per kill, no other restarts');
ok($KILLED{$first_server}, 'the first server was among them');
note('kills by kind: ', join(', ', map { "$_ $FIRED{$_}" } @KINDS), '; of them after the call instead of during it: ',
    join(', ', map { "$_ $FELL_BACK{$_}" } grep { $_ ne 'between' } @KINDS));
if ($KILLS >= @KINDS) {
    cmp_ok($FIRED{$_}, '>', 0, "killed at '$_' points") for @KINDS;
}

$SPAWNED = 0;
my ($without, undef) = run_session([ @ops_per_round[ 0 .. $rounds - 1 ] ]);
is_deeply([ scalar(keys %KILLED), $SPAWNED ], [ $kills, 0 ], 'the reference run: no kill, one server throughout');
is_deeply([ grep { !ref $_->[1] && ($_->[1] // '') =~ /crs-bridge/ } @$with_kills ], [], 'no crs-bridge error reached the caller');
my @semantic = grep { !ref $_->[1] && ($_->[1] // '') =~ /^died: / } @$without;
is(scalar @semantic, $rounds, 'the reference run had its one semantic error per round');
my ($first_difference) = grep { !Test::More::eq_array($with_kills->[$_], $without->[$_]) } 0 .. $#$without;
ok(!defined $first_difference && @$with_kills == @$without, 'every answer identical to the run without kills')
    or diag("seed $SEED; first difference at $with_kills->[$first_difference][0]:\n",
        explain($with_kills->[$first_difference][1]), "\nexpected:\n", explain($without->[$first_difference][1]));

subtest 'a server killed at every start: retried once, then a clear message' => sub {
    local $ENV{CRS_BRIDGE_COMMAND} = "$^X -e 'kill KILL => \$\$'";
    kill('KILL', server_pid());
    $SPAWNED = 0;
    # An object after the first of its kind is created without waiting (its scheduler.new goes
    # with the next request): the query finds the server dead.
    like(error_of { PVE::RS::ResourceScheduling::Dynamic->new()->calculate_node_imbalance() },
        qr/^crs-bridge: cannot start the server '.*': it ended before answering \(its log went to .*\)\n\z/,
        'cannot start');
    is($SPAWNED, 2, 'two attempts');
    delete local $ENV{CRS_BRIDGE_COMMAND};
    is(live_handles(), 0, 'the next call starts a working server');
};

done_testing();
