#!/usr/bin/perl
# One round trip of the Perl client, without a round around it: a query through the full
# CRSBridge::Connection::query path (the memo dropped before each: a miss, as a changed round's
# queries are), calculate_node_imbalance of 3 nodes, p50 over the trips; and the client's CPU per
# trip (means; polling for the answer counts). Trees are measured side by side, alternated in
# blocks, each with its own client (DIR/perl-client/lib) and server (PYTHONPATH=DIR).
#
#   PATH=.venv/bin:$PATH perl benchmarks/perl_round_trip.pl [--trips N] [--blocks N] [--tree DIR]...

use strict;
use warnings;

use Cwd ();
use File::Temp qw(tempfile);
use FindBin;
use Getopt::Long;

my %opt = (trips => 3000, blocks => 8, tree => []);
GetOptions(\%opt, 'trips=i', 'blocks=i', 'tree=s@')
    or die "usage: $0 [--trips N] [--blocks N] [--tree DIR]...\n";
my @trees = map { Cwd::abs_path($_) // die "no such tree: $_\n" } @{ $opt{tree} };
@trees = (Cwd::abs_path("$FindBin::Bin/..")) if !@trees;

# The measuring process: prints "p50 cpu" in seconds.
my $TRIPS = <<'PERL';
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
use PVE::RS::ResourceScheduling::Dynamic;
my ($trips) = @ARGV;
# CPU seconds of this process: /proc/self/schedstat counts ns (times() counts 10 ms ticks).
sub cpu_seconds {
    open(my $fh, '<', '/proc/self/schedstat') or return (times)[0];
    my ($ns) = split ' ', scalar <$fh>;
    return $ns / 1e9;
}
my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
$usage->add_node("n$_", { maxcpu => 16, maxmem => 1 << 36, cpu => 1, mem => 1 << 30 }) for 1 .. 3;
$usage->calculate_node_imbalance;
# The object as the connection's query takes it: its remote (trees before the client's split:
# the object's state), and a fresh memo (before: none).
my ($conn, $st) = (CRSBridge::Connection->instance, $usage->{_crs});
$st = $st->{remote} if $st->{remote};
my $forget = $INC{'CRSBridge/Memo.pm'} ? sub { $conn->{memo} = CRSBridge::Memo->new } : sub { delete $conn->{memo} };
my @took;
my $cpu = cpu_seconds();
for (1 .. $trips) {
    $forget->();
    my $start = clock_gettime(CLOCK_MONOTONIC);
    $conn->query($st, 'scheduler.calculate_node_imbalance', '');
    push @took, clock_gettime(CLOCK_MONOTONIC) - $start;
}
$cpu = (cpu_seconds() - $cpu) / $trips;
@took = sort { $a <=> $b } @took;
printf "%.9f %.9f\n", $took[ @took / 2 ], $cpu;
PERL

my ($fh, $script) = tempfile(UNLINK => 1);
print {$fh} $TRIPS;
close($fh);
my %got;
for my $block (1 .. $opt{blocks}) {
    for my $tree (@trees) {
        local $ENV{PYTHONPATH} = $tree;
        my $out = qx($^X -I$tree/perl-client/lib $script $opt{trips});
        die "the trips failed in $tree\n" if $? || $out !~ /^(\S+) (\S+)$/;
        push @{ $got{$tree}{p50} }, $1;
        push @{ $got{$tree}{cpu} }, $2;
    }
}

sub median {
    my @sorted = sort { $a <=> $b } @_;
    return $sorted[ @sorted / 2 ];
}

printf "%-40s %12s %14s %8s\n", 'tree', 'trip p50', 'client CPU', 'p50/1st';
my $first = median(@{ $got{ $trees[0] }{p50} });
for my $tree (@trees) {
    my $p50 = median(@{ $got{$tree}{p50} });
    printf "%-40s %9.1f us %11.1f us %8.3f\n", $tree, 1e6 * $p50, 1e6 * median(@{ $got{$tree}{cpu} }), $p50 / $first;
}
