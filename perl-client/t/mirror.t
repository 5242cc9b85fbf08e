#!/usr/bin/perl
# The client-side mirror that raises upstream's semantic errors at the call (core/usage.py
# semantics), without a server.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use CRSBridge::Mirror;

my $m = CRSBridge::Mirror->new;
$m->add_node($_) for qw(A B C);
is(error_of { $m->add_node('B') }, "node 'B' already exists\n", 'duplicate node');
$m->add_resource('vm:1', 'A', undef, 1);
$m->add_resource('vm:2', 'A', 'B', 1);
$m->add_resource('vm:3', 'B', 'A', 1);
is(error_of { $m->add_resource('vm:1', 'B') }, "resource 'vm:1' already exists\n", 'duplicate sid first');
is(error_of { $m->add_resource('vm:4', 'Z') }, "current node for resource 'vm:4' does not exist\n", 'unknown node');
is(error_of { $m->add_resource('vm:4', 'Z', 'Z') }, "resource 'vm:4' has the same current and target node\n",
    'same nodes before unknown nodes');
is(error_of { $m->add_resource('vm:4', 'A', 'Z') }, "nodes for resource 'vm:4' do not exist\n", 'unknown target');

ok($m->remove_node('A'), 'removed');
ok(!$m->remove_node('A'), 'unknown: nothing removed');
is_deeply($m->node_names, [qw(B C)], 'order kept');
ok(!$m->has_resource('vm:1'), 'stationary resource removed with its node');
is(error_of { $m->add_resource('vm:2', 'C') }, "resource 'vm:2' already exists\n", 'moving away: stays');
is(error_of { $m->legacy_add('C', 'vm:2') }, '', '... stationary on B now, so it can start moving again');
is(error_of { $m->legacy_add('C', 'vm:3') }, '', 'moving to the removed node: stationary on its source');
is(error_of { $m->legacy_add('B', 'vm:3') }, "resource 'vm:3' is already moving to target node 'C'\n",
    'legacy add of a moving resource');
ok($m->has_resource('vm:3'), 'a failed legacy add changes nothing');
ok($m->remove_resource('vm:3'), 'remove');
ok(!$m->remove_resource('vm:3'), 'remove unknown');
ok($m->remove_node('C'), 'remove the target of a moving resource');
is(error_of { $m->legacy_add('C', 'vm:2') }, "nodes for resource 'vm:2' do not exist\n",
    'vm:2 is back to stationary on B');

# Memory near the server's limit (2**62 - 1 bytes per node): such adds go as single calls.
my $big = CRSBridge::Mirror->new;
$big->add_node('A', 2**59);
$big->add_node('B');
ok(!$big->memory_risk(2**60), 'far from the limit');
$big->add_resource('vm:1', 'A', undef, 2**60);
ok(!$big->memory_risk(2**58), 'under half the limit, with all nodes and resources together');
ok($big->memory_risk(2**59), 'half the limit: the server decides');
$big->remove_resource('vm:1');
ok($big->memory_risk(2**59), 'removals are not subtracted: a bound, not a count');
is(error_of { $big->legacy_add('B', 'vm:2', 2**59) }, '', 'a legacy add counts too');
ok($big->memory_risk(0), '... so even nothing more is a risk now');

# Adds collected by a caller and recorded as a batch (CRSBridge::Scheduler's fast path).
subtest 'batch_view and add_batch' => sub {
    my $m = CRSBridge::Mirror->new;
    $m->add_node($_, 2**40) for qw(A B);
    my ($nodes, $resources, $room) = $m->batch_view;
    is_deeply([ sort keys %$nodes ], [qw(A B)], 'the nodes');
    is_deeply($resources, {}, 'no resources yet');
    cmp_ok($room, '==', 2**61 - 2**41, 'the room: what the bound may grow before a memory risk');
    $m->add_batch({ 'vm:1' => 'A', 'vm:2' => 'B', 'vm:3' => [ 'A', 'B' ] }, 3 * 2**40);
    ok($m->has_resource('vm:1') && $m->has_resource('vm:3'), 'a first batch recorded');
    $m->add_batch({ 'vm:4' => 'A' }, 2**40);
    ok($m->has_resource('vm:1') && $m->has_resource('vm:4'), 'a later batch added to it');
    cmp_ok(($m->batch_view)[2], '==', 2**61 - 6 * 2**40, 'their bytes counted in the bound');
    is(error_of { $m->add_resource('vm:4', 'B') }, "resource 'vm:4' already exists\n", 'a duplicate of a batched sid dies');
    is(error_of { $m->legacy_add('A', 'vm:3') }, "resource 'vm:3' is already moving to target node 'B'\n",
        'a batched moving resource moves');
    ok($m->remove_node('A'), 'a node removed');
    ok(!$m->has_resource('vm:1') && !$m->has_resource('vm:4') && $m->has_resource('vm:2'),
        '... with its batched stationary resources, the others stay');
    is(error_of { $m->legacy_add('A', 'vm:3') }, "nodes for resource 'vm:3' do not exist\n",
        'the moving one is stationary on B now');
};

done_testing();
