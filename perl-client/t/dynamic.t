#!/usr/bin/perl
# Every method of PVE::RS::ResourceScheduling::Dynamic against a real crs-bridge server:
# return shapes, semantics and error texts (binding.md sections 2 and 6).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Dynamic;

my $CLASS = 'PVE::RS::ResourceScheduling::Dynamic';

sub node_stats {
    my ($cpu, $maxcpu, $mem, $maxmem) = @_;
    return { cpu => $cpu, maxcpu => $maxcpu, mem => $mem, maxmem => $maxmem };
}

sub resource {
    my ($node, %extra) = @_;
    return {
        stats => { cpu => 1.5, maxcpu => 4.0, mem => 2 * GiB, maxmem => 8 * GiB },
        running => 1, 'current-node' => $node, %extra,
    };
}

# Three nodes with measured usage (cores in use, cores, bytes in use, bytes).
my @NODES = ([ 'A', 8.0, 16, 32 * GiB, 64 * GiB ], [ 'B', 2.0, 16, 8 * GiB, 64 * GiB ], [ 'C', 1.0, 8, 4 * GiB, 32 * GiB ]);

sub cluster {
    my $d = $CLASS->new();
    $d->add_node($_->[0], node_stats(@$_[1 .. 4])) for @NODES;
    return $d;
}

subtest 'new' => sub {
    my $d = $CLASS->new();
    isa_ok($d, $CLASS);
    is_deeply($d->list_nodes, [], 'empty');
    is(error_of { $CLASS->new('x') }, "too many parameters for function 'new', (expected 1)\n", 'arity');
};

subtest 'add_node' => sub {
    my $d = $CLASS->new();
    my @returned = $d->add_node('A', node_stats(1.5, 16, GiB, 64 * GiB));
    is(scalar @returned, 0, 'returns nothing');
    is(error_of { $d->add_node('A', node_stats(0, 1, 0, 1)) }, "node 'A' already exists\n", 'duplicate');
    is(error_of { $d->add_node('B') }, "missing required parameter: 'stats'\n", 'arity');
    is(error_of { $d->add_node('B', 1, 2) }, "too many parameters for function 'add_node', (expected 3)\n",
        'too many (static style)');
    is(error_of { $d->add_node('B', { cpu => 0, maxcpu => 1, mem => 0 }) }, "error: missing field `maxmem`\n",
        'missing field');
    is(error_of { $d->add_node('B', node_stats(0, 2.5, 0, 1)) }, '', 'node cores as a float (truncated)');
    # A fresh literal: a helper's reused variable would keep a numeric body (and perlmod, which
    # looks at the body type, would accept it).
    is(error_of { $d->add_node('C', { cpu => '0.5', maxcpu => 2, mem => 0, maxmem => 1 }) },
        qq(error: invalid type: string "0.5", expected f64\n), 'cpu as a plain string');
    is(error_of { $d->add_node('C', node_stats(0, 2, -5, 1)) }, "error: invalid value: integer `-5`, expected usize\n",
        'negative memory');
    is(error_of { $d->add_node('C', [ 0.5, 2, 0, GiB ]) }, '', 'positional stats');
    like(error_of { $d->add_node('D', node_stats(0, 0, 0, 1)) }, qr/^Invalid params: stats\.maxcpu: .*\n\z/,
        'zero cores refused by crs-bridge');
    like(error_of { $d->add_node('D', node_stats(-1, 1, 0, 1)) }, qr/^Invalid params: stats\.cpu: .*\n\z/,
        'negative cpu refused by crs-bridge');
    # An integer core count (usize) just past crs-bridge's 2**53, which a double would round to it.
    like(error_of { $d->add_node('D', node_stats(0, 9007199254740993, 0, 1)) },
        qr/^Invalid params: stats\.maxcpu: .*\n\z/, 'cores of 2**53 + 1 refused by crs-bridge, not rounded');
    is_deeply($d->list_nodes, [qw(A B C)], 'refused calls changed nothing');
};

subtest 'remove_node, list_nodes, contains_node' => sub {
    my $d = cluster();
    $d->add_resource('vm:1', resource('A'));
    $d->add_resource('vm:2', resource('B', 'target-node' => 'A'));
    is($d->contains_node('B'), 1, 'contains');
    is($d->contains_node('X'), 0, 'does not contain');
    my @returned = $d->remove_node('A');
    is(scalar @returned, 0, 'returns nothing');
    is_deeply($d->list_nodes, [qw(B C)], 'removed');
    is(error_of { $d->add_resource('vm:1', resource('B')) }, '', 'its stationary resource went with it');
    is(error_of { $d->add_resource('vm:2', resource('C')) }, "resource 'vm:2' already exists\n",
        'a resource moving to it stays on its source');
    is(error_of { $d->remove_node('X') }, '', 'unknown: no-op');
    is(error_of { $d->contains_node() }, "missing required parameter: 'nodename'\n", 'arity');
    is_deeply(server_call($d, 'list_nodes'), [qw(B C)], 'the server agrees');
};

subtest 'add_resource' => sub {
    my $d = cluster();
    my @returned = $d->add_resource('vm:1', resource('A'));
    is(scalar @returned, 0, 'returns nothing');
    is(error_of { $d->add_resource('vm:1', resource('A')) }, "resource 'vm:1' already exists\n", 'duplicate');
    is(error_of { $d->add_resource('vm:2', resource('X')) }, "current node for resource 'vm:2' does not exist\n",
        'unknown node');
    is(error_of { $d->add_resource('vm:2', resource('B', 'target-node' => 'B')) },
        "resource 'vm:2' has the same current and target node\n", 'same nodes');
    is(error_of { $d->add_resource('vm:2', resource('B', 'target-node' => 'X')) },
        "nodes for resource 'vm:2' do not exist\n", 'unknown target');
    is(error_of { $d->add_resource('vm:2', { stats => { cpu => 1, maxcpu => 1, mem => 1 }, running => 1, 'current-node' => 'A' }) },
        "error: missing field `maxmem`\n", 'missing stats field');
    is(error_of { $d->add_resource('vm:2', { stats => resource('A')->{stats}, 'current-node' => 'A' }) },
        "error: missing field `running`\n", 'missing running');
    is(error_of { $d->add_resource('vm:2', resource('A', running => 'yes')) }, "error: expected bool value\n",
        'running as a string');
    is(error_of { $d->add_resource('vm:2', resource('A', running => !!1)) }, '', 'a Perl boolean');
    is(error_of { $d->add_resource('vm:3', resource('A', 'current-node' => 3)) },
        "error: invalid type: integer `3`, expected a string\n", 'numeric node name');
    is(error_of { $d->add_resource('vm:3') }, "missing required parameter: 'resource'\n", 'arity');
    is(error_of { $d->add_service('vm:3', resource('A')) } =~ /add_service/ ? 1 : 0, 1,
        'no add_service on a dynamic usage');
};

subtest 'remove_resource' => sub {
    my $d = cluster();
    $d->add_resource('vm:1', resource('A'));
    my @returned = $d->remove_resource('vm:1');
    is(scalar @returned, 0, 'returns nothing');
    is(error_of { $d->remove_resource('vm:1') }, '', 'unknown: no-op');
    is(error_of { $d->add_resource('vm:1', resource('B')) }, '', 'added again');
    is(error_of { $d->remove_resource('vm:1', 2) },
        "too many parameters for function 'remove_resource', (expected 2)\n", 'arity');
};

subtest 'calculate_node_imbalance' => sub {
    my $d = cluster();
    $d->add_resource('vm:1', resource('C', running => 0));
    my $expected = reference_imbalance([ map { [ @$_[1 .. 4] ] } @NODES ], 'raw');
    cmp_ok(abs($d->calculate_node_imbalance - $expected), '<', 1e-12, 'measured node usage only');
};

subtest 'score_best_balancing_migration_candidates[_topsis]' => sub {
    my $d = cluster();
    $d->add_resource('vm:1', resource('A'));
    $d->add_resource('vm:2', resource('A'));
    my $candidates = [ map { { leader => "vm:$_", resources => ["vm:$_"], nodes => [qw(B C)] } } 1, 2 ];
    for my $method (qw(score_best_balancing_migration_candidates score_best_balancing_migration_candidates_topsis)) {
        my $scored = $d->$method($candidates, 3);
        is(scalar @$scored, 3, "$method: limit");
        ok(!grep({ $_->{migration}{'source-node'} ne 'A' } @$scored), "$method: from A");
    }
    # Moving vm:1 (1.5 cores, 2 GiB in use) from A to B, computed here.
    my ($a, $b, $c) = @NODES;
    my $expected = reference_imbalance(
        [ [ $a->[1] - 1.5, 16, $a->[3] - 2 * GiB, 64 * GiB ], [ $b->[1] + 1.5, 16, $b->[3] + 2 * GiB, 64 * GiB ],
          [ @$c[1 .. 4] ] ], 'raw');
    my ($to_b) = grep { $_->{migration}{'target-node'} eq 'B' && $_->{migration}{sid} eq 'vm:1' }
        @{ $d->score_best_balancing_migration_candidates($candidates, 4) };
    cmp_ok(abs($to_b->{imbalance} - $expected), '<', 1e-12, 'what-if imbalance of a move');
    is(error_of { $d->score_best_balancing_migration_candidates_topsis($candidates) },
        "missing required parameter: 'limit'\n", 'arity');
};

subtest 'score_nodes_to_start_resource' => sub {
    my $d = cluster();
    my $scores = $d->score_nodes_to_start_resource({ cpu => 0, maxcpu => 2.0, mem => 0, maxmem => 4 * GiB });
    is_deeply([ map { $_->[0] } @$scores ], [qw(A B C)], 'node order');
    is(ranked($scores)->[0], 'B', 'the least loaded node wins');
    $d->add_resource('vm:9', { %{ resource('B') }, running => 0,
        stats => { cpu => 0, maxcpu => 16.0, mem => 0, maxmem => 60 * GiB } });
    is(ranked($d->score_nodes_to_start_resource({ cpu => 0, maxcpu => 2.0, mem => 0, maxmem => 4 * GiB }))->[0], 'C',
        'a starting resource counts at its limits');
    is(error_of { $d->score_nodes_to_start_resource({ maxcpu => 1, maxmem => 1 }) }, "error: missing field `cpu`\n",
        'static stats are not enough');
    is(error_of { $d->score_nodes_to_start_resource() }, "missing required parameter: 'resource_stats'\n", 'arity');
};

done_testing();
