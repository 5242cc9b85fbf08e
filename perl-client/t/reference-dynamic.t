#!/usr/bin/perl
# The published figures of upstream's crate tests (reference-figures.md section 8.1), through
# the Dynamic drop-in: imbalance (normalized and raw), bruteforce and TOPSIS order of the two
# candidates, their what-if imbalances, and start scoring orders.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Dynamic;

use constant EPSILON => 2.220446049250313e-16;    # f64::EPSILON, upstream's tolerance

my %CLUSTERS = (
    homogeneous => [
        [ node1 => 1.7, 16, 12334 * MiB, 64 * GiB ],
        [ node2 => 15.184, 16, 529 * MiB, 64 * GiB ],
        [ node3 => 5.2, 16, 9381 * MiB, 64 * GiB ],
    ],
    heterogeneous => [
        [ node1 => 1.7, 16, 12334 * MiB, 128 * GiB ],
        [ node2 => 15.184, 32, 529 * MiB, 96 * GiB ],
        [ node3 => 5.2, 24, 9381 * MiB, 64 * GiB ],
    ],
);

my %FIGURES = (
    homogeneous => {
        normalized => 0.3460548572604576, raw => 0.4893954724628247,
        what_if => { normalized => { node2 => 0.511933196160907, node3 => 0.422346017431863 },
                     raw => { node2 => 0.723982869039761, node3 => 0.597287465866405 } },
        start => { mem => [qw(node2 node3 node1)], cpu => [qw(node1 node3 node2)],
                   unlimited => [qw(node1 node3 node2)], combined => [qw(node2 node3 node1)] },
    },
    heterogeneous => {
        normalized => 0.23352917788066363, raw => 0.33026013056867354,
        what_if => { normalized => { node2 => 0.409710187680757, node3 => 0.371253581868279 },
                     raw => { node2 => 0.579417704060553, node3 => 0.52503185055771 } },
        start => { mem => [qw(node2 node1 node3)], cpu => [qw(node3 node2 node1)],
                   unlimited => [qw(node1 node3 node2)], combined => [qw(node2 node1 node3)] },
    },
);

my %START = (
    mem => { cpu => 0, maxcpu => 1.0, mem => 0, maxmem => 12 * GiB },
    cpu => { cpu => 0, maxcpu => 12.0, mem => 0, maxmem => 0 },
    unlimited => { cpu => 0, maxcpu => 0.0, mem => 0, maxmem => 0 },
    combined => { cpu => 0, maxcpu => 12.0, mem => 0, maxmem => 12 * GiB },
);

my $CANDIDATES = [ { leader => 'vm:101', resources => ['vm:101'], nodes => [qw(node2 node3)] } ];

sub usage_for {
    my ($cluster, $formula) = @_;
    local $ENV{CRS_BRIDGE_IMBALANCE} = $formula;
    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    for my $node (@{ $CLUSTERS{$cluster} }) {
        my ($name, $cpu, $maxcpu, $mem, $maxmem) = @$node;
        $usage->add_node($name, { cpu => $cpu, maxcpu => $maxcpu, mem => $mem, maxmem => $maxmem });
    }
    $usage->add_resource('vm:101', {
        stats => { cpu => 0.7, maxcpu => 4.0, mem => 8 * GiB, maxmem => 16 * GiB },
        running => 1, 'current-node' => 'node1',
    });
    return $usage;
}

sub targets {
    my ($scored) = @_;
    return [ map { $_->{migration}{'target-node'} } @$scored ];
}

for my $cluster (sort keys %CLUSTERS) {
    my $figures = $FIGURES{$cluster};
    subtest $cluster => sub {
        for my $formula (qw(normalized raw)) {
            my $usage = usage_for($cluster, $formula);
            cmp_ok(abs($usage->calculate_node_imbalance - $figures->{$formula}), '<=', EPSILON,
                "$formula imbalance");
            my $bruteforce = $usage->score_best_balancing_migration_candidates($CANDIDATES, 2);
            is_deeply(targets($bruteforce), [qw(node3 node2)], "$formula: bruteforce order");
            for my $scored (@$bruteforce) {
                my $target = $scored->{migration}{'target-node'};
                cmp_ok(abs($scored->{imbalance} - $figures->{what_if}{$formula}{$target}), '<=', EPSILON,
                    "$formula: what-if imbalance -> $target");
            }
            is_deeply(targets($usage->score_best_balancing_migration_candidates_topsis($CANDIDATES, 2)),
                [qw(node2 node3)], "$formula: TOPSIS order");
        }
        my $usage = usage_for($cluster, 'normalized');
        for my $kind (sort keys %START) {
            is_deeply(ranked($usage->score_nodes_to_start_resource($START{$kind})), $figures->{start}{$kind},
                "start scoring, $kind");
        }
    };
}

subtest 'balanced clusters' => sub {
    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    is($usage->calculate_node_imbalance, 0, 'empty: 0');
    for my $n (1 .. 3) {
        $usage->add_node("node$n", { cpu => 4.0, maxcpu => 16, mem => 8 * GiB, maxmem => 64 * GiB });
        is($usage->calculate_node_imbalance, 0, "$n identical node(s): exactly 0");
    }
};

done_testing();
