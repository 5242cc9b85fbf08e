#!/usr/bin/perl
# Print a cluster's node imbalance and its best balancing moves, through the Perl drop-in
# (PVE::RS::ResourceScheduling::Static or ::Dynamic, whichever the cluster's mode says).
#
#   PATH=.venv/bin:$PATH perl perl-client/examples/rebalance.pl examples/dynamic-cluster.json
#   perl perl-client/examples/rebalance.pl --method topsis --limit 5 --imbalance raw CLUSTER.json
#
# CLUSTER.json is what the server's headline methods take: {"usage": {"mode", "nodes",
# "resources"}, "candidates": [...], "limit": N}. Without candidates, every running guest may
# move to any other node (as the HA manager offers them when no affinity rules apply).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use Getopt::Long;
use JSON::PP;
use PVE::RS::ResourceScheduling::Dynamic;
use PVE::RS::ResourceScheduling::Static;

my %opt = (method => 'bruteforce');
GetOptions(\%opt, 'method=s', 'limit=i', 'imbalance=s', 'help')
    && @ARGV == 1 && !$opt{help} && $opt{method} =~ /^(?:bruteforce|topsis)$/
    or die "usage: $0 [--method bruteforce|topsis] [--limit N] [--imbalance normalized|raw] CLUSTER.json\n";
$ENV{CRS_BRIDGE_IMBALANCE} = $opt{imbalance} if $opt{imbalance};

my $cluster = read_cluster($ARGV[0]);
my $usage = build_usage($cluster->{usage});
my $candidates = compact_candidates($cluster->{candidates}, $cluster->{usage});
my $limit = $opt{limit} // $cluster->{limit} // 3;

my $imbalance = $usage->calculate_node_imbalance;
printf "%s cluster: %d nodes, %d guests; node imbalance %.4f (%s)\n", $cluster->{usage}{mode},
    scalar @{ $usage->list_nodes }, scalar @{ $cluster->{usage}{resources} // [] }, $imbalance,
    CRSBridge::Config::get('imbalance');

my $method = $opt{method} eq 'topsis'
    ? 'score_best_balancing_migration_candidates_topsis'
    : 'score_best_balancing_migration_candidates';
my $moves = $usage->$method($candidates, $limit);
print "no candidate moves\n" if !@$moves;
printf "best moves (%s, %d candidates):\n", $opt{method}, scalar @$candidates if @$moves;
my $rank = 0;
for my $scored (@$moves) {
    my $m = $scored->{migration};
    my $change = $imbalance > 0 ? 100 * ($scored->{imbalance} - $imbalance) / $imbalance : 0;
    printf "  %d. migrate %-8s %s -> %s: imbalance %.4f -> %.4f (%+.1f%%)\n", ++$rank, $m->{sid},
        $m->{'source-node'}, $m->{'target-node'}, $imbalance, $scored->{imbalance}, $change;
}

sub read_cluster {
    my ($path) = @_;
    open(my $fh, '<', $path) or die "cannot read $path: $!\n";
    local $/;
    my $cluster = eval { JSON::PP->new->decode(<$fh>) } or die "$path is not valid JSON: $@";
    die "$path has no \"usage\" object\n" if ref $cluster->{usage} ne 'HASH';
    return $cluster;
}

# A usage object with the snapshot's nodes (in order) and resources.
sub build_usage {
    my ($snapshot) = @_;
    my $static = ($snapshot->{mode} // '') eq 'static';
    die "usage.mode must be 'static' or 'dynamic'\n" if !$static && ($snapshot->{mode} // '') ne 'dynamic';
    my $usage = $static ? PVE::RS::ResourceScheduling::Static->new() : PVE::RS::ResourceScheduling::Dynamic->new();
    for my $node (@{ $snapshot->{nodes} }) {
        if ($static) {
            $usage->add_node($node->{name}, $node->{maxcpu}, $node->{maxmem});
        } else {
            $usage->add_node($node->{name}, { map { ($_ => $node->{$_}) } qw(cpu maxcpu mem maxmem) });
        }
    }
    my $add = $static ? 'add_service' : 'add_resource';
    for my $res (@{ $snapshot->{resources} // [] }) {
        $usage->$add($res->{sid}, { map { ($_ => $res->{$_}) } 'stats', 'running', 'current-node', 'target-node' });
    }
    return $usage;
}

# Candidates as the binding takes them (compact bundles); expanded ones are grouped per sid.
sub compact_candidates {
    my ($candidates, $snapshot) = @_;
    if (!$candidates) {
        my @nodes = map { $_->{name} } @{ $snapshot->{nodes} };
        return [ map {
            my $res = $_;
            { leader => $res->{sid}, resources => [ $res->{sid} ], nodes => [ grep { $_ ne $res->{'current-node'} } @nodes ] }
        } grep { $_->{running} && !defined $_->{'target-node'} } @{ $snapshot->{resources} // [] } ];
    }
    return $candidates if !@$candidates || exists $candidates->[0]{leader};
    my (%by_sid, @order);
    for my $c (@$candidates) {
        push @order, $c->{sid} if !$by_sid{ $c->{sid} };
        push @{ $by_sid{ $c->{sid} } }, $c->{'target-node'};
    }
    return [ map { { leader => $_, resources => [$_], nodes => $by_sid{$_} } } @order ];
}
