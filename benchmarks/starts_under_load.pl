#!/usr/bin/perl
# Server starts through the Perl drop-in on a loaded machine, and HA rounds that go on while
# servers are killed. A hypervisor under load is when HA needs its scheduler most.
#
# First the start cost: the time from a server's start to its first answer, as the first object
# of a process sees it (median and maximum of --starts starts), on the quiet machine and then
# with --load busy loops running (processes that spin; the kernel spreads them over every CPU).
# Then, with the load still on, HA-style rounds for --seconds: each a new usage object (static
# and dynamic alternately: nodes, guests, imbalance, the best migration with limit 1, start
# scores), dropped at its end, --gap seconds apart; meanwhile a killer process (higher
# priority, so that it acts on time) SIGKILLs every server the client starts: one in four during
# its start (within half a quiet start's time of it), every other one 0.4 to 2 s after its start
# (its first answer). A round passes when no call dies and every answer is the one the same
# round got on the quiet machine without kills. Prints the start figures, the load seen, the
# servers started (and their starts' times under the load), killed (during their start or
# after it) and started again after a death during their start, and the rounds passed.
#
#   PATH=.venv/bin:$PATH perl benchmarks/starts_under_load.pl [--load 10] [--seconds 60]
#       [--starts 7] [--gap 0.1] [--starts-only]   (--starts-only: the start figures alone)
#
# The busy loops end by themselves --seconds plus a minute after they began, should this
# program die without ending them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../perl-client/lib";

use Getopt::Long;
use List::Util qw(max);
use POSIX ();
use Time::HiRes qw(time sleep);

use CRSBridge::Config;
use CRSBridge::Connection;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Dynamic;
use PVE::RS::ResourceScheduling::Static;

my %opt = (load => 10, seconds => 60, starts => 7, gap => 0.1);
GetOptions(\%opt, 'load=i', 'seconds=f', 'starts=i', 'gap=f', 'starts-only')
    && $opt{load} > 0 && $opt{starts} > 0
    or die "usage: $0 [--load 10] [--seconds 60] [--starts 7] [--gap 0.1] [--starts-only]\n";

use constant { GiB => 1024**3, DISTINCT_ROUNDS => 24, SYS_PIDFD_SEND_SIGNAL => 424, SYS_PIDFD_OPEN => 434 };

# -- what the client does, counted through CRSBridge::Process ---------------------------------

my %COUNT = (started => 0, start_deaths => 0, later_deaths => 0);
CRSBridge::Connection->instance->shutdown;    # the next server is the killer's too
my ($ON_SPAWN, $ON_ANSWER) = (sub { }, sub { });    # called with each new server's pid, and at its first answer
{
    no warnings 'redefine';
    my ($spawn, $read_line, $kill) = map { \&{"CRSBridge::Process::$_"} } qw(spawn read_line kill);
    *CRSBridge::Process::spawn = sub {
        my $proc = $spawn->(@_);
        $COUNT{started}++;
        $ON_SPAWN->($proc->pid);
        return $proc;
    };
    # (A server's first line comes through read_line: ready_line takes only lines after it.)
    *CRSBridge::Process::read_line = sub {
        my $line = $read_line->(@_);
        $ON_ANSWER->($_[0]->pid) if !$_[0]{first_answer_noted}++;
        return $line;
    };
    # The client kills (or, unable to prove it is still its server, only drops) a server that
    # died or hung: whether it had answered tells a death during its start from a later one.
    *CRSBridge::Process::kill = sub {
        $COUNT{ $_[0]->answered ? 'later_deaths' : 'start_deaths' }++;
        return $kill->(@_);
    };
}

# -- load --------------------------------------------------------------------------------------

my @BUSY;    # pids of the busy loops

# Starts $count processes that spin until $until (epoch seconds) or until they are ended.
sub start_load {
    my ($count, $until) = @_;
    for (1 .. $count) {
        my $pid = fork() // die "fork: $!\n";
        if (!$pid) {
            my $spin = 0;
            $spin++ while time < $until;
            POSIX::_exit(0);
        }
        push @BUSY, $pid;
    }
    return;
}

sub end_load {
    local $?;    # (in END: the program's exit status)
    kill('KILL', @BUSY) if @BUSY;
    waitpid($_, 0) for @BUSY;
    @BUSY = ();
    return;
}

END { end_load() }
$SIG{$_} = sub { end_load(); POSIX::_exit(1) } for qw(INT TERM HUP);

# The 1-minute load average, and the tasks running now (/proc/loadavg, Linux).
sub load_now {
    open(my $fh, '<', '/proc/loadavg') or return (0, 0);
    my ($one, $running) = (<$fh> // '') =~ /^(\S+) \S+ \S+ (\d+)\//;
    return ($one // 0, $running // 0);
}

# -- start cost ----------------------------------------------------------------------------------

# Seconds from a server's start to its first answer, as a new process's first object sees it.
sub one_start {
    CRSBridge::Connection->instance->shutdown;
    my $started = time;
    my $usage = PVE::RS::ResourceScheduling::Static->new();    # the first object waits for its answer
    return time - $started;
}

# (median, maximum) seconds of $count starts.
sub start_cost {
    my ($count) = @_;
    my @times = sort { $a <=> $b } map { one_start() } 1 .. $count;
    return ($times[ $#times / 2 ], $times[-1]);
}

sub ms { return sprintf('%.0f ms', 1000 * $_[0]) }

# -- rounds ----------------------------------------------------------------------------------------

# Round $k's cluster, a function of $k: 5 nodes, 30 guests whose limits and usage drift.
sub cluster {
    my ($k) = @_;
    my @nodes = map { { name => "node$_", maxcpu => 16 * (1 + $_ % 3), maxmem => (64 << ($_ % 2)) * GiB,
        cpu => 0.7 * $_ + $k / 10, mem => ($_ + $k % 3) * GiB } } 1 .. 5;
    my @guests = map { {
        sid => "vm:$_", node => 'node' . (1 + ($_ * 7 + $k) % 3), maxcpu => 1 + ($_ + $k) % 4,
        maxmem => (1 + ($_ * 3 + $k) % 8) * GiB, cpu => 0.1 + (($_ * 13 + $k) % 17) / 9, mem => (1 + $_ % 5) * GiB / 2,
    } } 100 .. 129;
    return (\@nodes, \@guests);
}

# One HA-style round; its answers as text.
sub round {
    my ($k) = @_;
    my ($nodes, $guests) = cluster($k);
    my $dynamic = $k % 2;
    my $usage = $dynamic ? PVE::RS::ResourceScheduling::Dynamic->new() : PVE::RS::ResourceScheduling::Static->new();
    for my $n (@$nodes) {
        $dynamic ? $usage->add_node($n->{name}, { map { ($_ => $n->{$_}) } qw(cpu maxcpu mem maxmem) })
            : $usage->add_node($n->{name}, $n->{maxcpu}, $n->{maxmem});
    }
    for my $g (@$guests) {
        my %stats = map { ($_ => $g->{$_}) } $dynamic ? qw(cpu maxcpu mem maxmem) : qw(maxcpu maxmem);
        my $guest = { stats => \%stats, running => 1, 'current-node' => $g->{node} };
        $dynamic ? $usage->add_resource($g->{sid}, $guest) : $usage->add_service($g->{sid}, $guest);
    }
    my @names = map { $_->{name} } @$nodes;
    my @candidates = map {
        my $g = $_;
        { leader => $g->{sid}, resources => [ $g->{sid} ], nodes => [ grep { $_ ne $g->{node} } @names ] }
    } @$guests[ 0 .. 9 ];
    my $best = $usage->score_best_balancing_migration_candidates(\@candidates, 1)->[0];
    my $start = $dynamic
        ? $usage->score_nodes_to_start_resource({ cpu => 0.5, maxcpu => 2, mem => GiB, maxmem => 2 * GiB })
        : $usage->score_nodes_to_start_service({ maxcpu => 2, maxmem => 2 * GiB });
    return join(' ', sprintf('%.17g', $usage->calculate_node_imbalance),
        "$best->{migration}{sid}>$best->{migration}{'target-node'}", sprintf('%.17g', $best->{imbalance}),
        map { sprintf('%s=%.17g', @$_) } @$start);
}

# -- the killer --------------------------------------------------------------------------------

# Forks the killer; returns (the handle to send it "pid delay\n" lines, the handle of its report).
# It takes a pidfd on each server as it learns of it (the server has just started), so that it
# never signals another process that got the pid meanwhile; it reports "during later" kills
# sent to live servers once its input ends.
sub start_killer {
    pipe(my $orders, my $to_killer) && pipe(my $report, my $to_parent) or die "pipe: $!\n";
    my $pid = fork() // die "fork: $!\n";
    if ($pid) {
        close($_) for $orders, $to_parent;
        $to_killer->autoflush(1);
        return ($to_killer, $report, $pid);
    }
    close($_) for $to_killer, $report;
    POSIX::nice(-10);    # (root only; elsewhere it acts later under load)
    my ($during, $later) = (0, 0);
    my @due;    # [when, pidfd, during start?]
    my $buffer = '';
    while (1) {
        my $wait = @due ? max(0, $due[0][0] - time) : undef;
        my $bits = '';
        vec($bits, fileno($orders), 1) = 1;
        if (select(my $ready = $bits, undef, undef, $wait) > 0) {
            my $n = sysread($orders, $buffer, 4096, length $buffer);
            last if !$n;
            while ($buffer =~ s/^(\d+) (\S+) (\d)\n//) {
                my $pidfd = syscall(SYS_PIDFD_OPEN, 0 + $1, 0);
                push @due, [ time + $2, $pidfd, $3 ] if $pidfd >= 0;
            }
            @due = sort { $a->[0] <=> $b->[0] } @due;
        }
        while (@due && $due[0][0] <= time) {
            my ($when, $pidfd, $in_start) = @{ shift @due };
            if (syscall(SYS_PIDFD_SEND_SIGNAL, $pidfd, 9, 0, 0) == 0) {
                $in_start ? $during++ : $later++;
            }
            POSIX::close($pidfd);
        }
    }
    syswrite($to_parent, "$during $later\n");
    POSIX::_exit(0);
}

# -- main --------------------------------------------------------------------------------------

my $cpus = do {
    open(my $fh, '<', '/proc/cpuinfo') or die "cannot read /proc/cpuinfo: $!\n";
    scalar grep { /^processor\s*:/ } <$fh>;
};
my $timeout = CRSBridge::Config::get('start-timeout');
my @quiet = start_cost($opt{starts});
start_load($opt{load}, time + $opt{seconds} + 60 + 30 * $opt{starts});
sleep 2;    # the busy loops are running
my @loaded = start_cost($opt{starts});
my ($load_average, $running) = load_now();
printf "server start to first answer through the drop-in: quiet median %s (max %s); with %d busy loops on %d CPUs"
    . " (load average %.1f, %d tasks running) median %s (max %s); start-timeout %s s\n",
    ms($quiet[0]), ms($quiet[1]), $opt{load}, $cpus, $load_average, $running, ms($loaded[0]), ms($loaded[1]), $timeout;
exit 0 if $opt{'starts-only'};

# The rounds' answers on the quiet machine, without kills (the load paused meanwhile).
kill('STOP', @BUSY);
my @expected = map { round($_) } 0 .. DISTINCT_ROUNDS - 1;
kill('CONT', @BUSY);

my ($killer_in, $killer_report, $killer) = start_killer();
my ($serial, %spawned, @start_times) = (0);
$ON_SPAWN = sub {
    my ($pid) = @_;
    $spawned{$pid} = time;
    printf {$killer_in} "%d %.4f 1\n", $pid, rand($quiet[0] / 2) if $serial++ % 4 == 0;
};
$ON_ANSWER = sub {
    my ($pid) = @_;
    my $started = delete $spawned{$pid} // return;
    push @start_times, time - $started;
    printf {$killer_in} "%d %.4f 0\n", $pid, 0.4 + rand(1.6);    # (a victim of its start never answers)
};
%COUNT = (started => 0, start_deaths => 0, later_deaths => 0);
CRSBridge::Connection->instance->shutdown;    # the next server is the killer's too
my ($rounds, $passed, %failures) = (0, 0);
my @seen_load;
my $until = time + $opt{seconds};
while (time < $until) {
    my $k = $rounds++ % DISTINCT_ROUNDS;
    my $got = eval { round($k) } // do { (my $error = $@) =~ s/\n.*//s; "died: $error" };
    if ($got eq $expected[$k]) {
        $passed++;
    } else {
        $failures{ $got =~ /^died: (.{0,120})/ ? $1 : 'another answer' }++;
    }
    push @seen_load, (load_now())[0];
    sleep $opt{gap};
}
close($killer_in);
my ($during, $later) = split ' ', (<$killer_report> // '0 0');
waitpid($killer, 0);
CRSBridge::Connection->instance->shutdown;
end_load();

my $gave_up = 0;
$gave_up += $failures{$_} for grep {/cannot start/} keys %failures;
my $restarted = $COUNT{start_deaths} - $gave_up;
printf "%d HA-style rounds in %.0f s at load average %.1f-%.1f: %d passed, %d failed\n", $rounds, $opt{seconds},
    (sort { $a <=> $b } @seen_load)[0], max(@seen_load), $passed, $rounds - $passed;
@start_times = sort { $a <=> $b } @start_times;
printf "servers: %d started (start to first answer: median %s, max %s), %d killed (%d during their start, %d 0.4-2 s"
    . " after it), %d died before their first answer and were started again, %d died after answering\n",
    $COUNT{started}, ms($start_times[ $#start_times / 2 ] // 0), ms($start_times[-1] // 0), $during + $later, $during,
    $later, $restarted, $COUNT{later_deaths};
print "failed rounds: $failures{$_} x $_\n" for sort keys %failures;
