#!/usr/bin/perl
# Mutations are buffered and sent as one scheduler.apply per object before the next query (or
# when many have piled up), semantic errors still die at the call that caused them, destroyed
# objects are freed on the server, and the server's state always matches what the client
# answers locally.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use List::Util qw(min sum);
use POSIX ();
use Test::More;
use CRSBridgeTest;
use CRSBridge::Batching;
use CRSBridge::Connection;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

# Count what is written to the server: messages (lines), requests inside them, and mutations
# inside those (scheduler.apply entries); and list the mutations of each batch queued.
my ($messages, $requests, $mutations, @batches) = (0, 0, 0);
{
    no warnings 'redefine';
    my $queue = \&CRSBridge::Process::queue;
    *CRSBridge::Process::queue = sub {
        my ($self, $bytes) = @_;
        $messages += () = $bytes =~ /\n/g;
        $requests += () = $bytes =~ /"jsonrpc":"2\.0"/g;
        my $count = () = $bytes =~ /\["(?:add|remove)_/g;
        $mutations += $count;
        push @batches, $count if $count;
        return $queue->(@_);
    };
}

sub live_handles {
    return CRSBridge::Connection->instance->call(undef, 'bridge.info', '{}')->{schedulers};
}

sub service {
    my ($node) = @_;
    return { stats => { maxcpu => 1.0, maxmem => GiB }, running => 1, 'current-node' => $node };
}

my $usage = PVE::RS::ResourceScheduling::Static->new();
($messages, $requests) = (0, 0);
my $first = CRSBridge::Batching::FIRST_CHUNK;
$usage->add_node("node$_", 16, 64 * GiB) for 1 .. 4;
$usage->add_service("vm:$_", service('node' . (1 + $_ % 4))) for 1 .. $first - 5;
is($messages, 0, ($first - 1) . ' mutations: nothing sent yet');

is(error_of { $usage->add_node('node1', 1, 1) }, "node 'node1' already exists\n", 'duplicate node dies at the call');
is(error_of { $usage->add_service('vm:1', service('node1')) }, "resource 'vm:1' already exists\n",
    'duplicate sid dies at the call');
is(error_of { $usage->add_service('vm:x', service('node9')) }, "current node for resource 'vm:x' does not exist\n",
    'unknown node dies at the call');
is($messages, 0, '... without asking the server');
is_deeply($usage->list_nodes, [ map { "node$_" } 1 .. 4 ], 'list_nodes is answered locally');
is($usage->contains_node('node2'), 1, 'contains_node too');
is($messages, 0, '... without asking the server');

$usage->add_service("vm:$_", service('node' . (1 + $_ % 4))) for $first - 4 .. 200;
($messages, $requests) = (0, 0);
my $imbalance = $usage->calculate_node_imbalance;
is($messages, 2, 'a query sends the buffered mutations and the query');
is($requests, 2, '... the mutations as one request');
is($mutations, 204, 'every mutation was sent');
my @loads = map { [ 50, 16, 50 * GiB, 64 * GiB ] } 1 .. 4;
cmp_ok(abs($imbalance - reference_imbalance(\@loads, 'normalized')), '<', 1e-12, 'the server has them all');

($messages, $requests) = (0, 0);
$usage->remove_service_usage('vm:nope');
$usage->remove_node('node-nope');
server_call($usage, 'calculate_node_imbalance');    # a call: a repeated query is answered from memory
is($requests, 1, 'no-op removals are not sent at all');

($messages, $requests) = (0, 0);
$usage->add_service("vm:$_", service('node1')) for 1001 .. 2200;
cmp_ok($messages, '>=', 2, 'a large buffer is sent before the next query');
is(scalar @{ server_call($usage, 'list_nodes') }, 4, 'and everything still agrees');
$usage->remove_node('node1');
is_deeply(server_call($usage, 'list_nodes'), $usage->list_nodes, 'server and client agree after remove_node');

subtest 'the buffer is sent at FIRST_CHUNK mutations after a call, then at twice as many, up to CHUNK, over all objects' => sub {
    my ($first, $chunk) = (CRSBridge::Batching::FIRST_CHUNK, CRSBridge::Batching::CHUNK);
    my ($one, $two) = map { PVE::RS::ResourceScheduling::Static->new() } 1 .. 2;
    $_->add_node('n1', 16, 64 * GiB) for $one, $two;
    $one->calculate_node_imbalance;    # nothing left buffered
    my $i = 0;
    for (my $due = $first; $due <= $chunk; $due = $due * 2 < $chunk ? $due * 2 : $chunk) {
        ($messages, $requests, $mutations) = (0, 0, 0);
        ($i++ % 3 ? $one : $two)->add_service("vm:$i", service('n1')) for 1 .. $due - 1;
        is($messages, 0, ($due - 1) . ' adds to two objects: nothing sent yet');
        $one->add_service('vm:last' . $i++, service('n1'));
        is($messages, 1, "the ${due}th: sent at once");
        is($requests, 2, '... as one request per object');
        is($mutations, $due, '... holding every one of them');
        last if $due == $chunk;
    }
    ($messages, $mutations) = (0, 0);
    $two->add_service("vm:more$_", service('n1')) for 1 .. $chunk - 1;
    is($messages, 0, 'at most CHUNK from then on');
    $two->calculate_node_imbalance;
    is($mutations, $chunk - 1, 'the rest are sent with the next query');
    $two->add_service('vm:short', service('n1'));
    $two->calculate_node_imbalance;    # a short run: the next one expects nothing (see the next subtest)
    ($messages, $mutations) = (0, 0);
    $two->add_service("vm:again$_", service('n1')) for 1 .. $first;
    is_deeply([ $messages, $mutations ], [ 1, $first ], 'after the query, FIRST_CHUNK again');
};

subtest 'a run as long as the last one goes in shrinking chunks, and little with the query' => sub {
    my ($first, $chunk, $tail, $share) = (CRSBridge::Batching::FIRST_CHUNK, CRSBridge::Batching::CHUNK,
        CRSBridge::Batching::TAIL_CHUNK, CRSBridge::Batching::TAIL_SHARE);
    my $rounds = 0;
    # An HA round of $guests adds (and its node), its imbalance and another call with nothing
    # journaled in between (the round's scores): the mutations of each batch it sent.
    my $round = sub {
        my ($guests) = @_;
        $rounds++;
        @batches = ();
        my $usage = PVE::RS::ResourceScheduling::Static->new();
        $usage->add_node('n1', 16, 64 * GiB);
        $usage->add_service("vm:$rounds:$_", service('n1')) for 1 .. $guests;
        $usage->calculate_node_imbalance;
        server_call($usage, 'list_nodes');
        return [@batches];
    };
    $round->(300) for 1 .. 2;    # (the first one's run may hold what the last subtest left)
    my $batches = $round->(300);
    is(sum(@$batches), 301, 'a round as long as the last: every mutation sent');
    cmp_ok(scalar @$batches, '>', 1, '... not all with the query');
    my $left = 301;
    for my $size (@$batches[ 0 .. $#$batches - 1 ]) {
        cmp_ok($size, '<=', POSIX::ceil($share * $left), "$size of the $left still to come: at most TAIL_SHARE");
        cmp_ok($size, '>=', $tail, '... and at least TAIL_CHUNK');
        $left -= $size;
    }
    cmp_ok($share * $left, '<', $tail, "the query finds only $left to apply (TAIL_SHARE of them: under TAIL_CHUNK)");

    $batches = $round->(900);
    is(sum(@$batches), 901, 'a round longer than the last: every mutation sent');
    my ($before, @past) = (0);    # the batches (but the query's) sent once the last round's length was passed
    for my $i (0 .. $#$batches - 1) {
        push @past, $i if $before >= 301;
        $before += $batches->[$i];
    }
    ok(scalar @past, 'past the last round\'s length it sends more chunks');
    for my $i (@past) {
        my $prev = $batches->[ $i - 1 ];
        is($batches->[$i], min(2 * $prev, $chunk), "... each twice the last, up to CHUNK ($batches->[$i])");
    }
    $batches = $round->(150);
    is(sum(@$batches), 151, 'a round shorter than the last: every mutation sent');
    cmp_ok(scalar(grep { $_ < $tail } @$batches[ 0 .. $#$batches - 1 ]), '==', 0,
        '... in chunks of at least TAIL_CHUNK, the rest with the query');

    $round->(10);
    is_deeply($round->(300), [ $first, 2 * $first, 301 - 3 * $first ],
        'after a round of fewer than FIRST_CHUNK: FIRST_CHUNK, twice as many, the rest with the query');
};

subtest 'destroyed objects are freed on the server' => sub {
    my $before = live_handles();
    my $other = PVE::RS::ResourceScheduling::Dynamic->new();
    $other->add_node('n', { cpu => 0, maxcpu => 1, mem => 0, maxmem => 1 });
    is(live_handles(), $before + 1, 'one more handle');
    undef $other;
    is(live_handles(), $before, 'freed with the next message');
};

subtest 'a value the server refuses is reported by the server, at the call' => sub {
    ($messages, $requests) = (0, 0);
    my $fresh = PVE::RS::ResourceScheduling::Static->new();
    $fresh->add_node('a', 1, GiB);
    like(error_of { $fresh->add_node('b', 0, GiB) }, qr/^Invalid params: maxcpu: /, 'zero cores');
    is_deeply($fresh->list_nodes, ['a'], 'not added');
    is_deeply(server_call($fresh, 'list_nodes'), ['a'], 'not on the server either');
};

subtest 'a buffered mutation the server refuses after all (a safety net)' => sub {
    my $broken = PVE::RS::ResourceScheduling::Static->new();
    my $fine = PVE::RS::ResourceScheduling::Static->new();
    $fine->add_node('a', 4, GiB);
    $broken->add_node('a', 4, GiB);
    # Bypass the client's checks: something the server will refuse.
    $broken->{_crs}{mirror}->add_node('b', undef, '["add_node","b",0,1]');
    CRSBridge::Connection::journaled();
    my $error = error_of { $broken->calculate_node_imbalance };
    like($error, qr/^crs-bridge: the server refused a buffered add_node of this scheduler object \(Invalid params: maxcpu: .*\); the object is unusable, create a new one\n\z/,
        'the next query says what happened');
    is(error_of { $broken->list_nodes }, $error, 'the object stays unusable');
    is(error_of { $fine->calculate_node_imbalance }, '', 'other objects are not affected');
};

subtest "a round: the new object's creation, its journal and the first query in one write" => sub {
    PVE::RS::ResourceScheduling::Dynamic->new();    # the first dynamic object waits for the server's answer
    my $before = live_handles();
    my ($writes, $reads) = (0, 0);
    no warnings 'redefine';
    my ($queue, $read) = (\&CRSBridge::Process::queue, \&CRSBridge::Process::read_line);
    local *CRSBridge::Process::queue = sub { $writes++ if !$_[2]; goto &$queue };    # $_[2]: held for the next
    local *CRSBridge::Process::read_line = sub { $reads++; goto &$read };
    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    $usage->add_node($_->[0], { cpu => $_->[1], maxcpu => 8, mem => GiB, maxmem => 16 * GiB }) for [ a => 1.0 ], [ b => 4.0 ];
    $usage->add_resource('vm:1', { stats => { cpu => 1.0, maxcpu => 2, mem => GiB, maxmem => 2 * GiB },
        running => 1, 'current-node' => 'a' });
    is_deeply([ $writes, $reads ], [ 0, 0 ], 'new and the adds: nothing sent, nothing awaited');
    my $imbalance = $usage->calculate_node_imbalance;
    is_deeply([ $writes, $reads ], [ 1, 2 ], 'the query: one write, its answer after the batch\'s');
    cmp_ok($imbalance, '>', 0, 'the answer of the whole journal');
    undef $usage;
    PVE::RS::ResourceScheduling::Dynamic->new();    # dropped without a call: its new is never sent
    is(live_handles(), $before, 'freed, and nothing left on the server');
};

subtest "an object whose deferred creation the server refuses is unusable, with the server's reason" => sub {
    my $first = PVE::RS::ResourceScheduling::Static->new();
    # Take the handle the next object will choose (c and its id), so that its creation fails.
    CRSBridge::Connection->instance->call(undef, 'scheduler.new',
        '{"mode":"static","scheduler":"c' . ($first->{_crs}{remote}->id + 1) . '"}');
    my $next = PVE::RS::ResourceScheduling::Static->new();
    $next->add_node('a', 4, GiB);
    my $error = error_of { $next->calculate_node_imbalance };
    like($error, qr/^crs-bridge: the server refused a buffered scheduler\.new of this scheduler object \(Invalid params: scheduler: the handle 'c\d+' is in use; .*\); the object is unusable, create a new one\n\z/,
        'the next query says why');
    $first->add_node('a', 4, GiB);
    is(error_of { $first->calculate_node_imbalance }, '', 'other objects are not affected');
};

# Last: every live object is restored on the small-limit server and may be refused too.
subtest 'a whole batch refused (over the size limit)' => sub {
    my @server = @{ CRSBridge::Process::command() };
    local $ENV{CRS_BRIDGE_COMMAND} = join(' ', @server, '--max-message-bytes', 4000);
    kill('KILL', server_pid());
    my $big = PVE::RS::ResourceScheduling::Static->new();
    $big->add_node("node$_", 4, GiB) for 1 .. 200;
    like(error_of { $big->calculate_node_imbalance }, qr/^crs-bridge: the server refused a buffered batch .*exceeds the limit/,
        'the objects in it become unusable, with the reason');
    undef $big;
    kill('KILL', server_pid());
};

done_testing();
