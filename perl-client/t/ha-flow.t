#!/usr/bin/perl
# An HA-manager-like flow over many rounds (t/lib/HASim.pm models PVE::HA::Usage::* and
# Manager::load_balance): the usage is rebuilt every round through the drop-in, and the moves
# the balancer makes are checked: hold duration, one move per round and none while migrating,
# the margin, imbalance going down to what each move predicted, and stopping under the
# threshold.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use List::Util qw(sum0);
use Test::More;
use CRSBridgeTest;
use HASim;

# Imbalance of the simulated cluster, computed here from the simulation's own placement.
sub expected_imbalance {
    my ($sim, $formula) = @_;
    my %load = map { $_ => [ 0, 0 ] } keys %{ $sim->{nodes} };
    if ($sim->{mode} eq 'static') {
        for my $sd (values %{ $sim->services }) {
            next if $sd->{state} eq 'stopped';
            for my $node (grep { defined } $sd->{node}, $sd->{target}) {
                $load{$node}[0] += $sd->{maxcpu} || $sim->{nodes}{$node}{maxcpu};
                $load{$node}[1] += $sd->{maxmem};
            }
        }
    } else {
        my $measured = $sim->measured_node_usage;
        %load = map { $_ => [ $measured->{$_}{cpu}, $measured->{$_}{mem} ] } keys %$measured;
    }
    my @nodes = map { my $n = $sim->{nodes}{$_}; [ $load{$_}[0], $n->{maxcpu}, $load{$_}[1], $n->{maxmem} ] }
        sort keys %load;
    return reference_imbalance(\@nodes, $formula // 'raw');
}

# Runs $rounds rounds, checking every round's imbalance against the independent computation.
sub run_rounds {
    my ($sim, $rounds, $formula) = @_;
    my @reports;
    for (1 .. $rounds) {
        my $expected = expected_imbalance($sim, $formula);
        my $report = $sim->round;
        cmp_ok(abs($report->{imbalance} - $expected), '<', 1e-12, "round $report->{round}: imbalance")
            or diag("got $report->{imbalance}, expected $expected");
        push @reports, $report;
    }
    return \@reports;
}

sub moves { return grep { $_->{move} } @{ $_[0] } }

sub check_moves {
    my ($sim, $reports) = @_;
    my @moved = moves($reports);
    my $hold = $sim->{hold_duration};
    is($moved[0]{round}, $hold, "first move after $hold rounds over the threshold (hold duration)");
    for my $i (0 .. $#moved) {
        my $move = $moved[$i];
        my ($during, $after) = @$reports[ $move->{round}, $move->{round} + 1 ];
        next if !$after;
        is($during->{skipped}, 'migration running', "round $during->{round}: no balancing while migrating");
        cmp_ok(abs($after->{imbalance} - $move->{move}{expected}), '<', 1e-12,
            "move of $move->{move}{sid} in round $move->{round}: the predicted imbalance is reached");
        cmp_ok(($move->{imbalance} - $after->{imbalance}) / $move->{imbalance}, '>=', $sim->{margin},
            '... improving by at least the margin');
        next if $i == 0;
        # Rounds strictly between the two moves (report k is round k + 1).
        my @balancing = grep { !$_->{skipped} } @$reports[ $moved[ $i - 1 ]{round} .. $move->{round} - 2 ];
        is(scalar(@balancing) + 1, $hold, "move in round $move->{round}: again after $hold rounds over the threshold");
    }
    return @moved;
}

subtest 'static scheduler, bruteforce: a skewed cluster is balanced, then left alone' => sub {
    my %services;
    for my $i (1 .. 12) {
        $services{"vm:" . (100 + $i)} = { node => $i <= 8 ? 'node1' : 'node2', state => 'started', running => 1,
            maxcpu => $i % 3 ? 2.0 : 4.0, maxmem => ($i % 3 ? 4 : 8) * GiB };
    }
    $services{'vm:200'} = { node => 'node3', state => 'stopped', running => 0, maxcpu => 8.0, maxmem => 32 * GiB };
    my $sim = HASim->new(mode => 'static', services => \%services,
        nodes => { map { ("node$_" => { maxcpu => 16, maxmem => 64 * GiB }) } 1 .. 4 });
    my $reports = run_rounds($sim, 30);
    my @moved = check_moves($sim, $reports);
    cmp_ok(scalar @moved, '>=', 2, 'several moves were needed');
    ok(!grep({ $_->{move}{from} ne 'node1' && $_->{move}{from} ne 'node2' } @moved), 'moves leave the loaded nodes');
    my $last = $reports->[-1];
    cmp_ok($last->{imbalance}, '<=', $sim->{threshold}, 'ends under the threshold');
    is(scalar(grep { $_->{move} } @$reports[ -8 .. -1 ]), 0, 'and stops moving');
    is($last->{counter}, 0, 'hold counter reset under the threshold');
    is($services{'vm:200'}{node}, 'node3', 'a stopped guest is never moved');
    is_deeply([ grep { /unable/ } @{ $sim->log_lines } ], [], 'no errors logged');
};

subtest 'dynamic scheduler, TOPSIS: measured usage on heterogeneous nodes' => sub {
    my %nodes = (
        a => { maxcpu => 32, maxmem => 128 * GiB, cpu => 1.0, mem => 4 * GiB },
        b => { maxcpu => 16, maxmem => 64 * GiB, cpu => 0.5, mem => 2 * GiB },
        c => { maxcpu => 8, maxmem => 32 * GiB, cpu => 0.5, mem => 2 * GiB },
    );
    my %services;
    for my $i (1 .. 10) {
        $services{"vm:$i"} = { node => 'a', state => 'started', running => 1, maxcpu => 4.0, maxmem => 8 * GiB,
            cpu => 0.5 + ($i % 4), mem => (1 + $i % 5) * GiB };
    }
    my $sim = HASim->new(mode => 'dynamic', method => 'topsis', nodes => \%nodes, services => \%services,
        hold_duration => 2, threshold => 0.15);
    my $reports = run_rounds($sim, 30);
    my @moved = check_moves($sim, $reports);
    cmp_ok(scalar @moved, '>=', 1, 'moves were made');
    cmp_ok($reports->[-1]{imbalance}, '<', $reports->[0]{imbalance}, 'the cluster is better balanced');
    is(scalar(grep { $_->{move} } @$reports[ -6 .. -1 ]), 0, 'and the balancer stops');
    is_deeply([ grep { /unable/ } @{ $sim->log_lines } ], [], 'no errors logged');
};

subtest 'the margin: no move that would not improve enough' => sub {
    my $sim = HASim->new(mode => 'static', hold_duration => 1,
        nodes => { map { ("n$_" => { maxcpu => 8, maxmem => 32 * GiB }) } 1, 2 },
        services => { 'vm:1' => { node => 'n1', state => 'started', running => 1, maxcpu => 8.0, maxmem => 32 * GiB } });
    my $reports = run_rounds($sim, 6);
    cmp_ok($reports->[0]{imbalance}, '>', $sim->{threshold}, 'over the threshold');
    is(scalar(moves($reports)), 0, 'moving the only guest would just mirror the imbalance: no move');
};

subtest 'raw (the default) keeps pve-ha-manager 5.2.0 threshold semantics, normalized does not' => sub {
    my %services = map {
        ("vm:$_" => { node => $_ <= 5 ? 'n1' : $_ <= 8 ? 'n2' : $_ <= 10 ? 'n3' : 'n4', state => 'started',
            running => 1, maxcpu => 2.0, maxmem => 4 * GiB })
    } 1 .. 12;
    my %nodes = map { ("n$_" => { maxcpu => 16, maxmem => 64 * GiB }) } 1 .. 4;
    my %moves;
    for my $formula (qw(normalized raw)) {
        local $ENV{CRS_BRIDGE_IMBALANCE} = $formula;
        my $sim = HASim->new(mode => 'static', nodes => \%nodes,
            services => { map { ($_ => { %{ $services{$_} } }) } keys %services });
        $moves{$formula} = [ moves(run_rounds($sim, 4, $formula)) ];
    }
    is(scalar @{ $moves{normalized} }, 0, 'normalized imbalance is under 0.3: no move');
    is(scalar @{ $moves{raw} }, 1, 'the raw coefficient of variation is over 0.3: a move');
};

done_testing();
