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
is($big->add_resource('vm:1', 'A', undef, 2**60), 1, 'far from the limit: recorded');
is($big->add_resource('vm:0', 'A', undef, 2**58), 1, 'under half the limit, with all nodes and resources together');
is($big->add_resource('vm:2', 'A', undef, 2**58), 0, 'half the limit: not recorded, the server decides');
ok(!$big->has_resource('vm:2'), '... nothing of it');
$big->remove_resource('vm:1');
is($big->add_resource('vm:2', 'A', undef, 2**58), 0, 'removals are not subtracted: a bound, not a count');
is($big->legacy_add('B', 'vm:2', 2**58), 0, 'a legacy add of an unknown resource too');
is($big->legacy_add('B', 'vm:2', 2**58, undef, 1), 1, '... recorded when the server has accepted it (risky)');
is($big->add_resource('vm:3', 'A', undef, 0), 0, '... and counted: even nothing more is a risk now');
is($big->legacy_add('A', 'vm:2', 2**58), 1, 'a known resource that starts moving adds nothing to the bound');

# The journal: each accepted mutation's entry, in order; a failed or no-op one leaves none.
subtest 'the journal' => sub {
    my $m = CRSBridge::Mirror->new;
    $m->add_node('A', undef, 'node A');
    $m->add_node('B', 2**30, 'node B');
    is(error_of { $m->add_node('A', undef, 'node A again') }, "node 'A' already exists\n", 'a duplicate dies');
    $m->add_resource('vm:1', 'A', undef, 1, 'vm:1 on A');
    is(error_of { $m->add_resource('vm:2', 'Z', undef, 1, 'vm:2 on Z') }, "current node for resource 'vm:2' does not exist\n",
        'an unknown node dies');
    $m->legacy_add('B', 'vm:1', 1, 'vm:1 to B');
    ok(!$m->remove_resource('vm:9', 'remove vm:9'), 'an unknown sid: nothing removed');
    ok(!$m->remove_node('Z', 'remove Z'), 'an unknown node: nothing removed');
    ok($m->remove_node('A', 'remove A'), 'a node removed');
    ok($m->remove_resource('vm:1', 'remove vm:1'), 'a resource removed');
    is_deeply($m->journal, [ 'node A', 'node B', 'vm:1 on A', 'vm:1 to B', 'remove A', 'remove vm:1' ],
        'the accepted mutations, in order');
};

done_testing();
