#!/usr/bin/perl
# A query repeated in the same state (CRSBridge::Connection::query: an HA round rebuilt with the
# same nodes, guests and candidates) is answered from memory once the server has accepted the
# object's mutations: the same answer, no query sent to the server, a fresh structure each time,
# recorded by the flight recorder as the server's answer. Anything that differs (a guest's
# stats, the candidates, the limit, the mode, the formula, the server) is asked of the server; a
# few answers are kept per state; an object whose mutations the server refused dies as when
# asked; alarms in the answer from memory leave everything usable; rounds answered from memory
# leave no answers piling up. Real server, real client.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use IO::Select;
use JSON::PP;
use Test::More;
use CRSBridgeTest;
use CRSBridge::Connection;
use CRSBridge::Memo;
use CRSBridge::Process;
use CRSBridge::Records qw(candidates_param);
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

# Queries written to the server (batches of mutations, scheduler.new and free are not).
my $QUERIES = 0;
{
    no warnings 'redefine';
    my $queue = \&CRSBridge::Process::queue;
    *CRSBridge::Process::queue = sub {
        $QUERIES += () = $_[1] =~ /"method":"scheduler\.(?:calculate|score|select)_/g;
        goto &$queue;
    };
}

# (queries sent, what $code returned) of running $code.
sub asked {
    my ($code) = @_;
    my $before = $QUERIES;
    my $result = $code->();
    return ($QUERIES - $before, $result);
}

my @NODES = qw(a b c);

# The usage of an HA round: $guests guests over three nodes; %change: {stats => [sid, maxmem]}
# alters one guest, {mode => 'dynamic'} builds the dynamic one.
sub usage {
    my ($guests, %change) = @_;
    my $dynamic = ($change{mode} // '') eq 'dynamic';
    my $usage = $dynamic ? PVE::RS::ResourceScheduling::Dynamic->new : PVE::RS::ResourceScheduling::Static->new;
    for my $node (@NODES) {
        $dynamic ? $usage->add_node($node, { cpu => 1, maxcpu => 16, mem => GiB, maxmem => 64 * GiB })
            : $usage->add_node($node, 16, 64 * GiB);
    }
    for my $i (1 .. $guests) {
        my ($sid, $maxmem) = ("vm:$i", (1 + $i % 8) * GiB);
        $maxmem = $change{stats}[1] if $change{stats} && $change{stats}[0] eq $sid;
        my $stats = $dynamic ? { cpu => 0.5, maxcpu => 1 + $i % 4, mem => $maxmem / 2, maxmem => $maxmem }
            : { maxcpu => 1 + $i % 4, maxmem => $maxmem };
        my $add = $dynamic ? 'add_resource' : 'add_service';
        $usage->$add($sid, { stats => $stats, running => 1, 'current-node' => $NODES[ $i % 3 ] });
    }
    return $usage;
}

sub candidates {
    my ($guests) = @_;
    return [ map {
        my $here = $NODES[ $_ % 3 ];
        { leader => "vm:$_", resources => ["vm:$_"], nodes => [ grep { $_ ne $here } @NODES ] }
    } 1 .. $guests ];
}

# The HA manager's queries of a round: [imbalance, best migrations].
sub round {
    my ($usage, $candidates, $limit) = @_;
    return [ $usage->calculate_node_imbalance, $usage->score_best_balancing_migration_candidates($candidates, $limit) ];
}

# The same queries as calls, which always ask the server (the expected answers).
sub server_round {
    my ($usage, $candidates, $limit) = @_;
    return [ server_call($usage, 'calculate_node_imbalance'),
        server_call($usage, 'score_best_balancing_migration_candidates',
            '"candidates":' . candidates_param($candidates) . ",\"limit\":$limit") ];
}

subtest 'a repeated round is answered from memory, once the server has taken its mutations' => sub {
    my $candidates = candidates(30);
    my ($first_asked, $first) = asked(sub { round(usage(30), $candidates, 1) });
    is($first_asked, 2, 'the first round asks the server');
    my $server = server_pid();
    my ($asked, $again) = asked(sub { round(usage(30), $candidates, 1) });
    is($asked, 0, 'the repeated round does not ask the server');
    is_deeply($again, $first, '... and answers as the server did');
    is(server_pid(), $server, 'the server was kept');
    is(CRSBridge::Connection->instance->{batching}->awaited, 0, "... and has answered the round's mutations");
    kill('STOP', $server);
    my $stopped = eval {
        local $ENV{CRS_BRIDGE_TIMEOUT} = 1;
        [ asked(sub { round(usage(30), $candidates, 1) }) ];
    };
    kill('CONT', $server);
    is($@, '', 'a stopped server: the repeated round does not answer before its mutations are accepted,');
    is($stopped->[0], 2, '... but asks a new server, once the stopped one is given up');
    is_deeply($stopped->[1], $first, '... which answers as the old one did');
    isnt(server_pid(), $server, '(a new server)');
};

subtest 'a round that differs asks the server and gets its answer' => sub {
    my $candidates = candidates(31);
    my $usage = usage(31);
    round($usage, $candidates, 1);
    my ($asked) = asked(sub { round(usage(31), $candidates, 1) });
    is($asked, 0, 'the same round again: answered from memory');
    my @variants = (
        [ "a guest's stats", 2, usage(31, stats => [ 'vm:7', 32 * GiB ]), $candidates, 1 ],
        [ 'the candidates', 1, usage(31), [ @$candidates[ 0 .. 9 ] ], 1 ],
        [ 'the limit', 1, usage(31), $candidates, 2 ],
        [ 'the mode', 2, usage(31, mode => 'dynamic'), $candidates, 1 ],
    );
    for my $variant (@variants) {
        my ($what, $queries, @round) = @$variant;
        round(usage(31), $candidates, 1);    # remembered again
        my ($asked, $got) = asked(sub { round(@round) });
        is($asked, $queries, "$what: asked ($queries of the 2 queries differ)");
        is_deeply($got, server_round(@round), "$what: the server's answer");
    }
    $usage->add_node('d', 16, 64 * GiB);
    ($asked) = asked(sub { round($usage, $candidates, 1) });
    is($asked, 2, 'an object that changed asks');
};

subtest 'another imbalance formula asks the server' => sub {
    my $candidates = candidates(32);
    my $raw = round(usage(32), $candidates, 1);
    local $ENV{CRS_BRIDGE_IMBALANCE} = 'normalized';
    my $usage = usage(32);
    my ($asked, $normalized) = asked(sub { round($usage, $candidates, 1) });
    is($asked, 2, 'the same journal under the other formula: asked');
    is_deeply($normalized, server_round($usage, $candidates, 1), "the server's answer");
    isnt($normalized->[0], $raw->[0], '(which differs from the raw one)');
};

subtest 'a few answers are kept per state: the first ones' => sub {
    my $usage = usage(40);
    my $kept = CRSBridge::Memo::ANSWERS;
    my $start = sub { $usage->score_nodes_to_start_service({ maxcpu => 1, maxmem => $_[0] * GiB }) };
    my @first = map { $start->($_) } 1 .. $kept + 4;
    my ($asked, $again) = asked(sub { [ map { $start->($_) } 1 .. $kept ] });
    is($asked, 0, "the first $kept queries again: answered from memory");
    is_deeply($again, [ @first[ 0 .. $kept - 1 ] ], '... as the server answered them');
    ($asked) = asked(sub { $start->($_) for $kept + 1 .. $kept + 4 });
    is($asked, 4, 'the later ones: asked again');
};

subtest 'answers from memory are fresh structures' => sub {
    my $candidates = candidates(33);
    my $first = round(usage(33), $candidates, 3);
    my $expected = JSON::PP->new->canonical->encode($first);
    for my $round (1 .. 2) {
        my ($asked, $got) = asked(sub { round(usage(33), $candidates, 3) });
        is($asked, 0, "round $round: answered from memory");
        is(JSON::PP->new->canonical->encode($got), $expected, "round $round: unchanged by what the caller did");
        $got->[1][0]{imbalance} = -1;
        push @{ $got->[1] }, 'mine';
        $first->[1][0]{migration}{sid} = 'changed';
    }
};

subtest 'a new server forgets what the old one answered' => sub {
    my $candidates = candidates(34);
    round(usage(34), $candidates, 1);
    my $old = server_pid();
    kill('KILL', $old);
    server_call(usage(2), 'calculate_node_imbalance');    # notices, starts a new server
    isnt(server_pid(), $old, 'a new server');
    my ($asked, $got) = asked(sub { round(usage(34), $candidates, 1) });
    is($asked, 2, 'the repeated round asks it');
    is_deeply($got, server_round(usage(34), $candidates, 1), 'and gets its answer');
};

subtest 'the flight recorder records an answer from memory as the server wrote it' => sub {
    my $dir = tempdir(CLEANUP => 1);
    local $ENV{CRS_BRIDGE_RECORD} = $dir;
    my $candidates = candidates(35);
    my ($asked) = asked(sub { round(usage(35), $candidates, 1) });
    is($asked, 2, 'the first round asks the server');
    ($asked) = asked(sub { round(usage(35), $candidates, 1) });
    is($asked, 0, 'the second is answered from memory');
    my @records = map {
        open(my $fh, '<', $_) or die "$_: $!";
        my $file = decode_json(do { local $/; <$fh> });
        delete @{ $file->{record} }{qw(time pid)};
        $file;
    } sort glob("$dir/crs-*.json");
    is(scalar @records, 2, 'two records');
    ok(defined $records[0]{record}{calls}[1]{answer}, 'the first has the answers');
    is_deeply($records[1], $records[0], 'the second is the same');
};

subtest 'a poisoned object dies, though its state was answered before' => sub {
    # A batch over the server's size limit is refused as a whole, poisoning every object in it:
    # the first round's batch fits, a second object's that goes with a third's does not.
    kill('KILL', server_pid());
    local $ENV{CRS_BRIDGE_MAX_MESSAGE_BYTES} = 5000;
    my $candidates = candidates(30);
    my $first = usage(30);
    my $expected = round($first, $candidates, 1);
    server_call(usage(2), 'list_nodes');    # a short run: the next batch is due at FIRST_CHUNK entries
    my $twin = usage(30);
    my $third = usage(30);    # its adds make a batch due: the twin's and its own, too large
    $first->score_nodes_to_start_service({ maxcpu => 1, maxmem => GiB });    # a call: the refusal is read
    like(error_of { $twin->calculate_node_imbalance }, qr/refused a buffered batch/, 'the twin dies saying why');
    is_deeply(round($first, $candidates, 1), $expected, 'the first object still answers');
    kill('KILL', server_pid());
};

# Found in review: the server may refuse an object's mutations where it accepted the same journal
# of another object: a limit per message (the twin's batch also carries its scheduler.new).
# Asked, the server would refuse the batch and the query would die; from memory too, as the
# memory answers only once the server has accepted every mutation (before, it answered).
subtest 'a twin whose unsent batch the server will refuse' => sub {
    # The size of a batch of an object's adds alone, as the first object's will be (created on a
    # server that then turns out dead, it is restored on a new one: not unborn there).
    my $batch = 0;
    {
        no warnings 'redefine';
        my $queue = \&CRSBridge::Process::queue;
        local *CRSBridge::Process::queue = sub { $batch = length $_[1] if $_[1] =~ /^\[/; goto &$queue };
        kill('KILL', server_pid());
        usage(10)->calculate_node_imbalance;
    }
    kill('KILL', server_pid());
    local $ENV{CRS_BRIDGE_MAX_MESSAGE_BYTES} = $batch + 20;    # the twin's is 100 bytes larger
    my $first = usage(10);
    my $expected = $first->calculate_node_imbalance;
    my $twin = usage(10);    # unborn: its scheduler.new goes with its adds, in a batch not yet sent
    my $error = error_of { $twin->calculate_node_imbalance };
    like($error, qr/refused a buffered batch/, 'the twin dies as when asked');
    like(error_of { $twin->score_nodes_to_start_service({ maxcpu => 1, maxmem => GiB }) },
        qr/refused a buffered batch/, 'its next call dies');
    is($first->calculate_node_imbalance, $expected, 'the first object still answers');
    kill('KILL', server_pid());
};

# Alarms (a signal handler that dies) in an answer from memory: the query dies with the
# handler's message, and the next ones answer right.
subtest 'alarms while an answer is given from memory' => sub {
    my $candidates = candidates(36);
    my $expected = round(usage(36), $candidates, 1);
    my $conn = CRSBridge::Connection->instance;
    no warnings 'redefine';
    my ($check, $decode) = (\&CRSBridge::Batching::answered, \&CRSBridge::Connection::decode_answer);
    my $die = '';
    local *CRSBridge::Batching::answered = sub { if ($die eq 'check') { $die = ''; die "got timeout\n" } goto &$check };
    local *CRSBridge::Connection::decode_answer = sub { if ($die eq 'decode') { $die = ''; die "got timeout\n" } goto &$decode };

    # A batch is sent (the adds of 70 guests make one due) and answered before the round, whose
    # answer from memory takes that answer in: the alarm comes after it left the read buffer.
    my $other = usage(70);
    IO::Select->new($conn->{proc}{out})->can_read(10);
    $die = 'check';
    is(error_of { round(usage(36), $candidates, 1) }, "got timeout\n", "in a batch's answer taken in: the handler's message");
    is($die, '', '(the alarm came)');
    $die = '';
    is_deeply(round(usage(36), $candidates, 1), $expected, '... the next round answers right');
    is_deeply(round($other, candidates(70), 1), server_round($other, candidates(70), 1), '... and so does the server');
    is($conn->{batching}->awaited, 0, '... with no batch left awaiting an answer after a call');

    $die = 'decode';
    is(error_of { round(usage(36), $candidates, 1) }, "got timeout\n", "in the decoding of the answer: the handler's message");
    is_deeply(round(usage(36), $candidates, 1), $expected, '... the next round answers right');
};

subtest 'after an interrupted call, repeated queries ask a new server' => sub {
    my ($candidates, $usage) = (candidates(39), usage(39));
    my $expected = round($usage, $candidates, 1);
    my $server = server_pid();
    kill('STOP', $server);
    my $error = error_of {
        local $SIG{ALRM} = sub { die "got timeout\n" };
        alarm(1);
        $usage->score_nodes_to_start_service({ maxcpu => 1, maxmem => GiB });    # not asked before
        alarm(0);
    };
    alarm(0);
    kill('CONT', $server);
    is($error, "got timeout\n", 'a call cut short by an alarm');
    # (A new object's creation would replace the server: the same object's queries again.)
    my ($asked, $got) = asked(sub { round($usage, $candidates, 1) });
    is($asked, 2, 'the repeated queries ask');
    isnt(server_pid(), $server, '... a new server (see INTERRUPTED CALLS)');
    is_deeply($got, $expected, '... which answers as the old one did');
};

subtest 'rounds answered from memory leave no answers piling up' => sub {
    my $candidates = candidates(38);
    round(usage(38), $candidates, 1);
    my $conn = CRSBridge::Connection->instance;
    my $asked = 0;
    for (1 .. 500) {
        my ($queries) = asked(sub { round(usage(38), $candidates, 1) });
        $asked += $queries;
    }
    is($asked, 0, '500 rounds answered from memory');
    is($conn->{batching}->awaited, 0, 'no batch awaiting an answer');
    cmp_ok(length $conn->{proc}{rbuf}, '<', 1000, 'the read buffer holds no more than a line');
};

subtest 'objects without mutations, answered from memory, leave no states piling up' => sub {
    # A new object of a mode the server has seen is created there with the next batch
    # (Connection::create), which its answer from memory sends and awaits.
    my $handles = sub { CRSBridge::Connection->instance->call(undef, 'bridge.info', '{}')->{schedulers} };
    PVE::RS::ResourceScheduling::Static->new->calculate_node_imbalance for 1 .. 2;    # remembered
    my $before = $handles->();
    my ($asked) = asked(sub { PVE::RS::ResourceScheduling::Static->new->calculate_node_imbalance for 1 .. 1000 });
    is($asked, 0, '1000 new objects answered from memory');
    cmp_ok($handles->(), '<=', $before + 1, 'objects on the server: no more than before (each freed with the next batch)');
};

done_testing();
