#!/usr/bin/perl
# The client's CPU time for the adds of an HA round, without the server's share: new usage
# object, add the nodes, add every guest (arguments built beforehand, so that the caller's own
# hashes are not counted), then one query that hands the last adds over. Prints p50 per phase and
# per add over the rounds. Each round's dynamic usage differs from the last (as perl_round.pl
# --change stats), so the query waits for the server (its CPU time is mostly that wait); static
# usage is the same every round, and the query is answered from memory.
#
#   PATH=.venv/bin:$PATH perl benchmarks/perl_adds.pl [--lib DIR] [--mode static|dynamic]
#       [--nodes 4] [--guests 300] [--rounds 600]
#
# To compare two clients, run it alternately with each --lib a few times (the machine's noise
# moves whole runs): e.g. /tmp/base/perl-client/lib (the last commit, as benchmarks/perl_round.pl
# makes it) and perl-client/lib.

use strict;
use warnings;

use FindBin;
my $LIB;
BEGIN {
    my ($at) = grep { $ARGV[$_] eq '--lib' } 0 .. $#ARGV - 1;
    $LIB = defined $at ? $ARGV[ $at + 1 ] : "$FindBin::Bin/../perl-client/lib";
}
use lib $LIB;

use Getopt::Long;
use Time::HiRes qw(clock_gettime CLOCK_PROCESS_CPUTIME_ID);

my %opt = (mode => 'dynamic', nodes => 4, guests => 300, rounds => 600);
GetOptions(\%opt, 'lib=s', 'mode=s', 'nodes=i', 'guests=i', 'rounds=i') && $opt{mode} =~ /^(?:static|dynamic)$/
    or die "usage: $0 [--lib DIR] [--mode static|dynamic] [--nodes N] [--guests N] [--rounds N]\n";

$ENV{CRS_BRIDGE_JSON} = 'PP';    # what a Proxmox node has
require PVE::RS::ResourceScheduling::Static;
require PVE::RS::ResourceScheduling::Dynamic;

my $GiB = 1024**3;
my $static = $opt{mode} eq 'static';
my @nodes = map { sprintf('node%02d', $_) } 1 .. $opt{nodes};
my @guests = map {
    { sid => 'vm:' . (100 + $_), node => $nodes[ $_ % @nodes ], maxcpu => 1.0 + $_ % 8, maxmem => (1 + $_ % 16) * $GiB }
} 0 .. $opt{guests} - 1;

# Round $r's add arguments: measured cpu with all 17 digits and mem that move every round.
sub arguments {
    my ($r) = @_;
    return [ map {
        my ($g, $x) = ($guests[$_], 0.6180339887498949 * ($_ + 1) + 0.41421356237309503 * $r);
        my $f = 0.95 + 0.1 * ($x - int($x));
        my $stats = $static ? { maxcpu => $g->{maxcpu}, maxmem => $g->{maxmem} }
            : { cpu => $g->{maxcpu} * 0.4 * $f, maxcpu => $g->{maxcpu}, mem => int($g->{maxmem} * 0.5 * $f),
                maxmem => $g->{maxmem} };
        [ $g->{sid}, { stats => $stats, running => 1, 'current-node' => $g->{node} } ]
    } 0 .. $#guests ];
}

sub cpu { return clock_gettime(CLOCK_PROCESS_CPUTIME_ID) }

# [new + nodes, adds, the query] in CPU seconds.
sub round {
    my ($r) = @_;
    my $args = arguments($r);
    my $t0 = cpu();
    my $usage = $static ? PVE::RS::ResourceScheduling::Static->new : PVE::RS::ResourceScheduling::Dynamic->new;
    for my $name (@nodes) {
        $static ? $usage->add_node($name, 32, 256 * $GiB)
            : $usage->add_node($name, { cpu => 3.3 + $r * 1e-6, maxcpu => 32, mem => 100 * $GiB, maxmem => 256 * $GiB });
    }
    my $t1 = cpu();
    if ($static) {
        $usage->add_service(@$_) for @$args;
    } else {
        $usage->add_resource(@$_) for @$args;
    }
    my $t2 = cpu();
    $usage->calculate_node_imbalance;
    return [ $t1 - $t0, $t2 - $t1, cpu() - $t2 ];
}

sub p50 {
    my @sorted = sort { $a <=> $b } @_;
    return $sorted[ $#sorted / 2 ];
}

round($_) for 1 .. 20;    # start the server, warm up
my @times = map { round($_) } 21 .. 20 + $opt{rounds};
my ($new, $adds, $query) = map { my $i = $_; 1e6 * p50(map { $_->[$i] } @times) } 0 .. 2;
printf "%s, %s, %d nodes, %d guests, %d rounds (client CPU, p50): new + nodes %.1f us, adds %.1f us"
    . " (%.2f us per add), query %.1f us\n",
    $LIB, $opt{mode}, $opt{nodes}, $opt{guests}, $opt{rounds}, $new, $adds, $adds / @guests, $query;
