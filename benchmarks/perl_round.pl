#!/usr/bin/perl
# One HA manager round through the Perl client, as PVE::HA::Manager does it every 10 s:
# new usage object, add the nodes, add every guest, compute the imbalance, score the balancing
# candidates with limit 1, drop the object. Prints p50/p90 over the rounds (the drop included),
# per JSON backend.
#
#   PATH=.venv/bin:$PATH perl benchmarks/perl_round.pl [--rounds 50] [--nodes 16] [--guests 2000]
#       [--mode static|dynamic] [--json PP|XS]   (no --json: runs each available backend)
#       [--change none|stats]    (none (default): every round's usage is the same as the last;
#                                 stats: each round's differs from the last as a real one would,
#                                 see stats_at)
#       [--split]                (time per phase, and the client's CPU time in it)
#       [--server-trace FILE]    (run the server with --trace FILE and print its time per request kind)
#       [--lib DIR]              (the Perl client to measure; default: perl-client/lib of this tree)
#       [--record DIR]           (rounds alternately without and with the flight recorder writing
#                                 to DIR, CRS_BRIDGE_RECORD; prints both and the recorder's cost)
#       [--layout spread|third]  (guests over the nodes: more on the first half (default), or a
#                                 third of them on the first node and the rest round-robin)
#       [--stream]               (for benchmarks/ha_round_sizes.pl: rounds on request, see there)
#
# A before/after comparison runs both sides alternately, each with its own client and server, e.g.
# the last commit (mkdir -p /tmp/base && git archive HEAD | tar -x -C /tmp/base) as the "before":
#   CRS_BRIDGE_COMMAND="env PYTHONPATH=/tmp/base .venv/bin/python -P -m crs_bridge serve" \
#       perl benchmarks/perl_round.pl --lib /tmp/base/perl-client/lib ...
# (-P: without it, "python -m" puts the current directory first on sys.path, ahead of
# PYTHONPATH, and a run from this tree would serve this tree's code.)

use strict;
use warnings;

use FindBin;
my $LIB;
BEGIN {
    # --lib is needed before the client is loaded; the other options are read below.
    my ($at) = grep { $ARGV[$_] eq '--lib' } 0 .. $#ARGV - 1;
    $LIB = defined $at ? $ARGV[ $at + 1 ] : "$FindBin::Bin/../perl-client/lib";
}
use lib $LIB;

use Getopt::Long;
use List::Util ();
use POSIX ();
use Time::HiRes qw(time clock_gettime CLOCK_PROCESS_CPUTIME_ID);

my %opt = (rounds => 50, nodes => 16, guests => 2000, mode => 'static', change => 'none');
GetOptions(\%opt, 'rounds=i', 'nodes=i', 'guests=i', 'mode=s', 'json=s', 'split', 'server-trace=s', 'lib=s', 'record=s',
    'layout=s', 'stream', 'change=s')
    && $opt{change} =~ /^(?:none|stats)$/
    or die "usage: $0 [--rounds N] [--nodes N] [--guests N] [--mode static|dynamic] [--json PP|XS] [--split]"
    . " [--server-trace FILE] [--lib DIR] [--record DIR] [--layout spread|third] [--change none|stats] [--stream]\n";

if (!$opt{json}) {
    # One process per backend: the backend is chosen once per process.
    my @args = map { ("--$_", $opt{$_}) } qw(rounds nodes guests mode change);
    push @args, '--layout', $opt{layout} if $opt{layout};
    push @args, '--split' if $opt{split};
    push @args, '--server-trace', $opt{'server-trace'} if $opt{'server-trace'};
    push @args, '--lib', $opt{lib} if $opt{lib};
    push @args, '--record', $opt{record} if $opt{record};
    for my $json ('PP', 'XS') {
        if ($json eq 'XS' && !eval { require Cpanel::JSON::XS; 1 }) {
            print "XS: Cpanel::JSON::XS is not installed, skipped\n";
            next;
        }
        system($^X, $0, @args, '--json', $json) == 0 or die "benchmark run failed\n";
    }
    exit 0;
}

$ENV{CRS_BRIDGE_JSON} = $opt{json};
if (my $trace = $opt{'server-trace'}) {
    unlink($trace);
    require CRSBridge::Process;
    $ENV{CRS_BRIDGE_COMMAND} = join(' ', @{ CRSBridge::Process::command() }, '--trace', $trace);
}
require PVE::RS::ResourceScheduling::Static;
require PVE::RS::ResourceScheduling::Dynamic;
require CRSBridge::Codec;

my $GiB = 1024**3;
my ($NODE_MAXCPU, $NODE_MAXMEM) = (32, 256 * $GiB);
my @nodes = map { sprintf('node%02d', $_) } 1 .. $opt{nodes};
# Guests spread unevenly, 1-8 cores, 1-16 GiB each: more on the first half of the nodes
# (spread), or a third on the first node and the others round-robin over the rest (third).
# cpu and mem are the measured usage's share of maxcpu and maxmem around which the dynamic
# stats vary (stats_at).
my $third = ($opt{layout} // 'spread') eq 'third';
my @guests = map {
    my $i = $_;
    my $maxcpu = 1.0 + ($i % 8);
    {
        sid => "vm:" . (100 + $i),
        node => $third
            ? $nodes[ $i % 3 == 0 || @nodes == 1 ? 0 : 1 + $i % (@nodes - 1) ]
            : $nodes[ ($i * $i) % @nodes < @nodes / 2 ? $i % (@nodes / 2) : $i % @nodes ],
        maxcpu => $maxcpu,
        maxmem => (1 + ($i % 16)) * $GiB,
        cpu => List::Util::min(0.9, 0.25 * (1 + ($i % 7)) / $maxcpu),
        mem => 0.5,
    }
} 0 .. $opt{guests} - 1;
# A node's measured share: its guests' summed usage over its size, at most 0.9.
my %node_share;
for my $g (@guests) {
    $node_share{ $g->{node} }{cpu} += $g->{cpu} * $g->{maxcpu} / $NODE_MAXCPU;
    $node_share{ $g->{node} }{mem} += $g->{mem} * $g->{maxmem} / $NODE_MAXMEM;
}
for my $share (values %node_share) {
    $_ = List::Util::min(0.9, $_) for values %$share;
}
my @candidates = map {
    my $g = $_;
    { leader => $g->{sid}, resources => [ $g->{sid} ], nodes => [ grep { $_ ne $g->{node} } @nodes ] }
} @guests;

# Rounds run so far; with --change stats each round's usage is that of its number.
my $round_number = 0;

# The usage HA reads in round $r: [node stats (array ref per node: add_node's arguments after
# the name), guest stats (hash ref per guest)], new hashes each round, as HA builds them.
# Static: from the guests' configs; round $r >= 1 edits one guest's config (guest ($r - 1) % N
# toggles 512 MiB of maxmem), as an admin's edit between two rounds would. Dynamic: RRD-like
# measured cpu (a fraction of maxcpu, full double precision) and mem (whole bytes), within the
# maxima: every node's and guest's values move by up to 5 % from round to round.
sub stats_at {
    my ($r) = @_;
    if ($opt{mode} eq 'static') {
        my @node_stats = map { [ $NODE_MAXCPU, $NODE_MAXMEM ] } @nodes;
        my @guest_stats = map {
            my $g = $guests[$_];
            my $edits = $r > $_ ? int(($r - 1 - $_) / @guests) + 1 : 0;
            { maxcpu => $g->{maxcpu}, maxmem => $g->{maxmem} + ($edits % 2) * $GiB / 2 }
        } 0 .. $#guests;
        return [ \@node_stats, \@guest_stats ];
    }
    my @node_stats = map {
        my $share = $node_share{ $nodes[$_] } // { cpu => 0.01, mem => 0.01 };
        [ {
            cpu => $NODE_MAXCPU * $share->{cpu} * measured($_, $r, 0), maxcpu => $NODE_MAXCPU,
            mem => int($NODE_MAXMEM * $share->{mem} * measured($_, $r, 1)), maxmem => $NODE_MAXMEM,
        } ]
    } 0 .. $#nodes;
    my @guest_stats = map {
        my $g = $guests[$_];
        {
            cpu => $g->{maxcpu} * $g->{cpu} * measured($_, $r, 2), maxcpu => $g->{maxcpu},
            mem => int($g->{maxmem} * $g->{mem} * measured($_, $r, 3)), maxmem => $g->{maxmem},
        }
    } 0 .. $#guests;
    return [ \@node_stats, \@guest_stats ];
}

# A factor in [0.95, 1.05) for item $i's value number $which in round $r: deterministic
# (a Weyl sequence), with the digits of a measured value, different in every round.
sub measured {
    my ($i, $r, $which) = @_;
    my $x = 0.6180339887498949 * ($i + 1) + 0.41421356237309503 * $r + 0.7548776662466927 * $which;
    return 0.95 + 0.1 * ($x - int($x));
}

# CPU seconds used by this (client) process so far; the server's time is not in it.
sub cpu {
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID);
}

sub round {
    my $static = $opt{mode} eq 'static';
    my ($node_stats, $guest_stats) = @{ stats_at($opt{change} eq 'stats' ? $round_number : 0) };
    $round_number++;
    my $cpu0 = cpu();
    my $t0 = time;
    my $usage = $static
        ? PVE::RS::ResourceScheduling::Static->new()
        : PVE::RS::ResourceScheduling::Dynamic->new();
    for my $i (0 .. $#nodes) {
        $usage->add_node($nodes[$i], @{ $node_stats->[$i] });
    }
    for my $i (0 .. $#guests) {
        my $g = $guests[$i];
        my $service = { stats => $guest_stats->[$i], running => 1, 'current-node' => $g->{node} };
        if ($static) {
            $usage->add_service($g->{sid}, $service);
        } else {
            $usage->add_resource($g->{sid}, $service);
        }
    }
    my ($t1, $cpu1) = (time, cpu());
    my $imbalance = $usage->calculate_node_imbalance();
    my ($t2, $cpu2) = (time, cpu());
    my $best = $usage->score_best_balancing_migration_candidates(\@candidates, 1);
    my ($t3, $cpu3) = (time, cpu());
    undef $usage;
    my ($t4, $cpu4) = (time, cpu());
    die "no migration found\n" if !@$best;
    return [ $t4 - $t0, $t1 - $t0, $t2 - $t1, $t3 - $t2, $t4 - $t3,
        $cpu4 - $cpu0, $cpu1 - $cpu0, $cpu2 - $cpu1, $cpu3 - $cpu2, $cpu4 - $cpu3 ];
}

sub percentile {
    my ($p, @values) = @_;
    my @sorted = sort { $a <=> $b } @values;
    return $sorted[ int($p * $#sorted + 0.5) ];
}

# CPU seconds the server process has used so far (Linux: /proc; undef elsewhere).
sub server_cpu {
    my $pid = CRSBridge::Connection->instance->server_pid // return undef;
    open(my $fh, '<', "/proc/$pid/stat") or return undef;
    my @fields = split ' ', (<$fh> =~ s/^.*\) //r);    # after "pid (comm) "
    return ($fields[11] + $fields[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

# With --record, odd rounds record and even ones do not (the recorder is chosen per object).
sub recorded_round {
    my ($on) = @_;
    local $ENV{CRS_BRIDGE_RECORD} = $on ? $opt{record} : '';
    return round();
}

my $backend = CRSBridge::Codec::backend();
stream() if $opt{stream};
if ($opt{record}) {
    -d $opt{record} or mkdir $opt{record} or die "cannot create $opt{record}: $!\n";
    recorded_round($_ % 2) for 1 .. 4;    # start the server, warm up
    my (@off, @on);
    for my $i (1 .. 2 * $opt{rounds}) {
        push @{ $i % 2 ? \@on : \@off }, recorded_round($i % 2);
    }
    printf "%s (%s), %s mode, change %s, %d nodes, %d guests, %d rounds each, side by side:\n",
        $opt{json}, $backend, $opt{mode}, $opt{change}, $opt{nodes}, $opt{guests}, $opt{rounds};
    report('recorder off', \@off);
    report('recorder on', \@on);
    my ($p50_off, $p50_on) = map { percentile(0.5, map { $_->[0] } @$_) } \@off, \@on;
    my ($mean_off, $mean_on) = map { List::Util::sum(map { $_->[0] } @$_) / @$_ } \@off, \@on;
    # The recorder works when the object is dropped: that phase, timed within each round, is
    # its cost with less noise than the difference of two whole rounds.
    my ($drop_off, $drop_on) = map { percentile(0.5, map { $_->[4] } @$_) } \@off, \@on;
    printf "    recorder cost: p50 %+.2f ms (%+.1f %%), mean %+.2f ms (%+.1f %%) per round;"
        . " drop p50 %.2f ms off, %.2f ms on (%+.1f %% of the round's p50 without it)\n",
        1000 * ($p50_on - $p50_off), 100 * ($p50_on / $p50_off - 1),
        1000 * ($mean_on - $mean_off), 100 * ($mean_on / $mean_off - 1),
        1000 * $drop_off, 1000 * $drop_on, 100 * ($drop_on - $drop_off) / $p50_off;
    exit 0;
}

round() for 1 .. 3;    # start the server, warm up
my $server0 = server_cpu();
my @times = map { round() } 1 .. $opt{rounds};
my $server1 = server_cpu();
my $server = defined $server0 && defined $server1
    ? sprintf(', server CPU: mean %.1f ms', 1000 * ($server1 - $server0) / $opt{rounds}) : '';
printf "%s (%s), %s mode, change %s, %d nodes, %d guests, %d rounds: p50 %.1f ms, p90 %.1f ms"
    . " (client CPU: mean %.1f ms%s per round)\n",
    $opt{json}, $backend, $opt{mode}, $opt{change}, $opt{nodes}, $opt{guests}, $opt{rounds},
    1000 * percentile(0.5, map { $_->[0] } @times), 1000 * percentile(0.9, map { $_->[0] } @times),
    1000 * List::Util::sum(map { $_->[5] } @times) / @times, $server;
report_split(\@times) if $opt{split};

sub report {
    my ($what, $times) = @_;
    printf "    %-14s p50 %.2f ms, p90 %.2f ms, mean %.2f ms (client CPU: mean %.2f ms)\n", $what,
        map({ 1000 * percentile($_, map { $_->[0] } @$times) } 0.5, 0.9),
        1000 * List::Util::sum(map { $_->[0] } @$times) / @$times,
        1000 * List::Util::sum(map { $_->[5] } @$times) / @$times;
    report_split($times) if $opt{split};
}

sub report_split {
    my ($times) = @_;
    my @names = ('new + adds (client side)', 'imbalance (incl. flush of the adds)', 'score candidates', 'drop the object');
    for my $i (1 .. 4) {
        printf "    %-38s p50 %.2f ms (client CPU p50 %.2f ms)\n", $names[ $i - 1 ],
            1000 * percentile(0.5, map { $_->[$i] } @$times), 1000 * percentile(0.5, map { $_->[ $i + 5 ] } @$times);
    }
}

print_server_time($opt{'server-trace'}) if $opt{'server-trace'};

# Server time per request kind and round, from the server's trace ("-->" request lines, each
# followed by a "<-- N ms" answer line); the first 3 (warm-up) rounds are left out.
sub print_server_time {
    my ($path) = @_;
    open(my $fh, '<', $path) or die "cannot read the trace $path: $!\n";
    my (@rounds, $kind);
    while (my $line = <$fh>) {
        if ($line =~ /^\S+ --> \[\w[\w-]*\] (\[?)\{.*?"method":"([^"]+)"/) {
            $kind = ($1 ? 'batches of ' : '') . $2;
            $kind =~ s/scheduler\.add_(node|service|resource)\b/scheduler.add_*/;
            # A round starts with its object's scheduler.new (alone, or in the batch of its journal).
            push @rounds, {} if $line =~ /"method":"scheduler\.new"/;
        } elsif ($line =~ /^\S+ <-- ([\d.]+) ms/ && defined $kind && @rounds) {
            $rounds[-1]{$kind} += $1;
            $rounds[-1]{total} += $1;
        }
    }
    splice(@rounds, 0, 3);
    my %kinds = map { %$_ } @rounds;
    printf "    server time per round (p50, from its trace):\n";
    for my $k (sort { $a eq 'total' ? 1 : $b eq 'total' ? -1 : $a cmp $b } keys %kinds) {
        printf "        %-62s %7.1f ms\n", $k, percentile(0.5, map { $_->{$k} // 0 } @rounds);
    }
}

# --stream: rounds on request, for a driver that alternates two trees (ha_round_sizes.pl).
# After 3 warm-up rounds it prints "ready"; then per line on stdin: "rounds N" runs N rounds
# and prints "round WALL CLIENT_CPU" per round (seconds) and "server CPU" (the server's CPU
# seconds so far, or "-"); "trips" runs one round counting the client's writes to the server
# and its round trips (waits for an answer after a write) and prints "trips WRITES TRIPS".
# Each answer ends with "done".
sub stream {
    $| = 1;
    round() for 1 .. 3;
    print "ready\n";
    while (my $line = <STDIN>) {
        if ($line =~ /^rounds (\d+)/) {
            for (1 .. $1) {
                my $t = round();
                print "round $t->[0] $t->[5]\n";
            }
            print "server ", server_cpu() // '-', "\n";
        } elsif ($line =~ /^trips/) {
            printf "trips %d %d\n", count_trips();
        }
        print "done\n";
    }
    exit 0;
}

# (writes, round trips) of one round: a round trip is a read of an answer after a write.
sub count_trips {
    my ($writes, $trips, $wrote) = (0, 0, 0);
    no warnings 'redefine';
    my ($queue, $read) = (\&CRSBridge::Process::queue, \&CRSBridge::Process::read_line);
    local *CRSBridge::Process::queue = sub { $writes++; $wrote = 1; goto &$queue };
    local *CRSBridge::Process::read_line = sub { $trips++ if $wrote; $wrote = 0; goto &$read };
    round();
    return ($writes, $trips);
}
