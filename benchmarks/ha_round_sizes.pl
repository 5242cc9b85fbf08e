#!/usr/bin/perl
# The HA manager's round (benchmarks/perl_round.pl: new, add the nodes, add every guest, the
# imbalance, score the balancing candidates with limit 1, drop the object) at the cluster sizes of
# @SIZES, 3 nodes x 30 guests to 48 x 10000, a third of the guests on one node, static and dynamic:
# p50 and p90 of the round, the client's and the server's CPU per round (means) apart, and the
# round trips per round.
# Each size and mode has two kinds of round (column "round"): "repeat", every round's usage the
# same as the last (perl_round.pl --change none), and "change", each round's usage differs from
# the last as on a real cluster (--change stats: dynamic, every node's and guest's measured cpu
# and mem move; static, one guest's config edit per round).
#
#   PATH=.venv/bin:$PATH perl benchmarks/ha_round_sizes.pl [--json PP|XS] [--scale F]
#       [--only 16x2000] [--round repeat|change] [--tree DIR]...
#
# --tree DIR (repeatable): measure these source trees side by side (default: this one); each
# runs its own Perl client (DIR/perl-client/lib) and its own server (this tree's Python, with
# PYTHONPATH=DIR), rounds alternated in blocks between the trees, so that the machine's noise
# falls on all of them alike. The last column is each tree's p50 over the first tree's.
# E.g. the last commit against the working tree:
#   mkdir -p /tmp/base && git archive HEAD | tar -x -C /tmp/base
#   PATH=.venv/bin:$PATH perl benchmarks/ha_round_sizes.pl --tree /tmp/base --tree .
# --scale F: F times the default rounds per size (from 200 at 3 x 30 to 8 at 48 x 10000).
# --only, --round: only that size, only that kind of round.

use strict;
use warnings;

use Cwd ();
use File::Temp ();
use FindBin;
use Getopt::Long;
use IPC::Open2 ();
use List::Util qw(sum);

my %opt = (json => 'PP', scale => 1, tree => []);
# perl_round.pl's --change for each kind of round
my %CHANGE = (repeat => 'none', change => 'stats');
GetOptions(\%opt, 'json=s', 'scale=f', 'only=s', 'round=s', 'tree=s@')
    && (!defined $opt{round} || $CHANGE{ $opt{round} })
    or die "usage: $0 [--json PP|XS] [--scale F] [--only NODESxGUESTS] [--round repeat|change] [--tree DIR]...\n";
my @kinds = $opt{round} // qw(repeat change);
my @trees = map { Cwd::abs_path($_) // die "no such tree: $_\n" } @{ $opt{tree} };
@trees = (Cwd::abs_path("$FindBin::Bin/..")) if !@trees;
-d "$_/perl-client/lib" or die "$_ has no perl-client/lib\n" for @trees;

# [nodes, guests, modes, rounds]
my @SIZES = (
    [ 3, 30, [qw(static dynamic)], 200 ],
    [ 4, 300, [qw(static dynamic)], 100 ],
    [ 8, 500, ['dynamic'], 60 ],
    [ 16, 2000, [qw(static dynamic)], 30 ],
    [ 48, 10000, [qw(static dynamic)], 8 ],
);
my $BLOCKS = 8;    # alternations per size, mode and kind of round

my $python = "$FindBin::Bin/../.venv/bin/python";
$python = 'python3' if !-x $python;

printf "%s, rounds alternated between %d tree(s), %s\n", "JSON::$opt{json}", scalar @trees, join(', ', @trees);
printf "%-10s %-8s %-6s %-5s %9s %9s %11s %11s %6s %8s\n",
    'size', 'mode', 'round', 'tree', 'p50 ms', 'p90 ms', 'client CPU', 'server CPU', 'trips', 'p50/1st';
for my $size (@SIZES) {
    my ($nodes, $guests, $modes, $rounds) = @$size;
    next if $opt{only} && $opt{only} ne "${nodes}x$guests";
    $rounds = int($rounds * $opt{scale}) || 1;
    for my $mode (@$modes) {
        for my $kind (@kinds) {
            my @results = measure($nodes, $guests, $mode, $CHANGE{$kind}, $rounds);
            for my $i (0 .. $#results) {
                my $r = $results[$i];
                printf "%-10s %-8s %-6s %-5s %9.2f %9.2f %11s %11s %6s %8.2f\n",
                    "${nodes}x$guests", $mode, $kind, $i + 1,
                    1000 * percentile(0.5, $r->{wall}), 1000 * percentile(0.9, $r->{wall}),
                    sprintf('%.2f ms', 1000 * sum(@{ $r->{cpu} }) / @{ $r->{cpu} }),
                    defined $r->{server} ? sprintf('%.2f ms', 1000 * $r->{server} / @{ $r->{wall} }) : '-',
                    $r->{trips}, percentile(0.5, $r->{wall}) / percentile(0.5, $results[0]{wall});
            }
        }
    }
}

# Each tree's rounds of one size, mode and kind (perl_round.pl's --change), alternated in blocks.
sub measure {
    my ($nodes, $guests, $mode, $change, $rounds) = @_;
    my @workers = map { worker($_, $nodes, $guests, $mode, $change) } @trees;
    my @results = map { { wall => [], cpu => [], server => 0 } } @trees;
    my $block = int($rounds / $BLOCKS) || 1;
    for (my $done = 0; $done < $rounds; $done += $block) {
        for my $i (0 .. $#workers) {
            my $answer = ask($workers[$i], "rounds $block");
            my ($before, $after) = ($workers[$i]{server}, $answer =~ /^server (\S+)$/m);
            for my $line ($answer =~ /^round (.*)$/mg) {
                my ($wall, $cpu) = split ' ', $line;
                push @{ $results[$i]{wall} }, $wall;
                push @{ $results[$i]{cpu} }, $cpu;
            }
            if ($after eq '-' || !defined $results[$i]{server}) {
                $results[$i]{server} = undef;
            } else {
                $results[$i]{server} += $after - $before;
            }
            $workers[$i]{server} = $after;
        }
    }
    for my $i (0 .. $#workers) {
        ($results[$i]{trips}) = ask($workers[$i], 'trips') =~ /^trips \d+ (\d+)$/m;
        close($workers[$i]{in});
        waitpid($workers[$i]{pid}, 0);
    }
    return @results;
}

# A perl_round.pl --stream process on $tree's client and server, warmed up.
sub worker {
    my ($tree, $nodes, $guests, $mode, $change) = @_;
    my $path = python_path($tree);
    local $ENV{CRS_BRIDGE_COMMAND} = "env PYTHONPATH=$path $python -P -m crs_bridge serve";
    my @cmd = ($^X, "$FindBin::Bin/perl_round.pl", '--stream', '--lib', "$tree/perl-client/lib",
        '--json', $opt{json}, '--nodes', $nodes, '--guests', $guests, '--mode', $mode, '--change', $change,
        '--layout', 'third');
    my $pid = IPC::Open2::open2(my $out, my $in, @cmd);
    my $w = { pid => $pid, in => $in, out => $out };
    my $ready = <$out> // die "the benchmark worker for $tree did not start\n";
    my ($server) = ask($w, 'rounds 0') =~ /^server (\S+)$/m;
    $w->{server} = $server;
    return $w;
}

# The PYTHONPATH entry under which crs_bridge, crs_bridge.core and crs_bridge.bridge are $tree's
# own: the tree itself if it links them into crs_bridge/, else a temporary folder with a compiled
# copy of its crs_bridge/ and links to its core/ and bridge/ (benchmarks/trees.py says why).
sub python_path {
    my ($tree) = @_;
    return $tree if -e "$tree/crs_bridge/core";
    my $farm = File::Temp::tempdir('crs-bridge-tree-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    system($python, '-c', 'import sys; sys.path.insert(0, sys.argv[1]); from trees import python_path; '
        . 'import shutil; shutil.copytree(python_path(sys.argv[2]), sys.argv[3], dirs_exist_ok=True, symlinks=True)',
        $FindBin::Bin, $tree, $farm) == 0
        or die "cannot lay out $tree for PYTHONPATH in $farm\n";
    return $farm;
}

sub ask {
    my ($w, $request) = @_;
    print { $w->{in} } "$request\n";
    $w->{in}->flush;
    my $answer = '';
    while (my $line = readline($w->{out})) {
        return $answer if $line eq "done\n";
        $answer .= $line;
    }
    die "the benchmark worker ended early\n";
}

sub percentile {
    my ($p, $values) = @_;
    my @sorted = sort { $a <=> $b } @$values;
    return $sorted[ int($p * $#sorted + 0.5) ];
}
