#!/usr/bin/perl -T
# One HA-style scheduling round through whichever PVE::RS::ResourceScheduling::{Static,Dynamic}
# perl finds first in @INC, as PVE::HA::Usage::{Static,Dynamic} drive them: build the usage node
# by node and guest by guest, score the nodes to start a guest, compute the node imbalance and
# score balancing migrations. `crs-bridge doctor` runs it in the daemon's conditions (perl -T,
# clean environment, stdio on /dev/null); the package test runs it from the installed paths.
#
# The clusters are upstream's published test cases (the perl-rs binding test's
# `test_overcommitted`, the scheduling crate's homogeneous dynamic cluster), so the answers can
# be compared with upstream's. The report is one JSON object written to file descriptor 3, or
# N with --report-fd N (stdout may be /dev/null, as under the daemon):
#   {modules: {static: {module, drop_in}, dynamic: {...}}, static: {start_order},
#    dynamic: {imbalance, moves: [{target, imbalance}]}, server: {pid, command, stderr},
#    error: TEXT (only when the round died)}
# --alarm N: before the round, interrupt N calls by an alarm whose handler dies, as
# PVE::Tools::run_with_timeout does; the round that follows must still give the right answers.

use strict;
use warnings;

use Getopt::Long ();
use JSON::PP;
use Time::HiRes ();

# As PVE::Daemon does: a PATH of its own (here the one given, as the daemon's is a literal, untainted).
($ENV{PATH}) = ($ENV{PATH} // '') =~ /^(.*)$/s;
# crs-bridge doctor --config passes its file here; the drop-in trusts no variable under -T.
($ENV{CRS_BRIDGE_CONFIG}) = $ENV{CRS_BRIDGE_CONFIG} =~ /^(.*)$/s if defined $ENV{CRS_BRIDGE_CONFIG};
delete @ENV{qw(IFS CDPATH ENV BASH_ENV)};

my %opt = (alarm => 0, 'report-fd' => 3);
Getopt::Long::GetOptions(\%opt, 'alarm=i', 'report-fd=i') && !@ARGV
    or die "usage: ha_round.pl [--alarm N] [--report-fd N]\n";
my ($alarms, $report_fd) = map { /^(\d+)$/ ? $1 : die "not a count: $_\n" } @opt{ 'alarm', 'report-fd' };
open(my $report_fh, '>&=', $report_fd) or die "crs-bridge round: file descriptor $report_fd is not open: $!\n";

my $GiB = 2**30;
my %report;
eval {
    require PVE::RS::ResourceScheduling::Static;
    require PVE::RS::ResourceScheduling::Dynamic;
    $report{modules} = { map { lc($_) => module_of("PVE::RS::ResourceScheduling::$_") } qw(Static Dynamic) };
    interrupted_calls($alarms) if $alarms;
    $report{static} = static_round();
    $report{dynamic} = dynamic_round();
    1;
} or $report{error} = "$@";
$report{server} = server() if $report{modules};
if ($report{modules}) {
    $report{config} = eval { config() };
    $report{config_error} = "$@" if $@;
}
print $report_fh JSON::PP->new->canonical->encode(\%report), "\n";
close($report_fh);
exit($report{error} ? 1 : 0);

sub module_of {
    my ($package) = @_;
    (my $file = "$package.pm") =~ s{::}{/}g;
    return { module => $INC{$file}, drop_in => $package->isa('CRSBridge::Scheduler') ? JSON::PP::true : JSON::PP::false };
}

# Four nodes of 4 cores; five guests of one core and 512 MiB, four of them on node A: a guest
# to start goes to the emptiest node first (upstream: C, D, B, A).
sub static_round {
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node($_, 4, 4102062080) for qw(A B);
    $usage->add_node($_, 4, 4102053888) for qw(C D);
    my %on = (a => 'A', b => 'A', c => 'A', d => 'B', e => 'A');
    for my $sid (sort keys %on) {
        $usage->add_service("vm:$sid",
            { stats => { maxcpu => 1.0, maxmem => 536870912 }, running => 1, 'current-node' => $on{$sid} });
    }
    my $scores = $usage->score_nodes_to_start_service({ maxcpu => 1.0, maxmem => 536870912 });
    my @order = map { $_->[0] } sort { $b->[1] <=> $a->[1] || $a->[0] cmp $b->[0] } @$scores;
    return { start_order => \@order };
}

# The crate's homogeneous cluster: imbalance raw 0.4893954724628247 (normalized
# 0.3460548572604576); vm:101 best moves to node3, then node2.
sub dynamic_round {
    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    $usage->add_node('node1', { cpu => 1.7, maxcpu => 16, mem => 12334 * 2**20, maxmem => 64 * $GiB });
    $usage->add_node('node2', { cpu => 15.184, maxcpu => 16, mem => 529 * 2**20, maxmem => 64 * $GiB });
    $usage->add_node('node3', { cpu => 5.2, maxcpu => 16, mem => 9381 * 2**20, maxmem => 64 * $GiB });
    $usage->add_resource('vm:101', {
        stats => { cpu => 0.7, maxcpu => 4.0, mem => 8 * $GiB, maxmem => 16 * $GiB },
        running => 1, 'current-node' => 'node1',
    });
    my $candidates = [ { leader => 'vm:101', resources => ['vm:101'], nodes => [ 'node2', 'node3' ] } ];
    my $moves = $usage->score_best_balancing_migration_candidates($candidates, 2);
    return {
        imbalance => $usage->calculate_node_imbalance(),
        moves => [ map { { target => $_->{migration}{'target-node'}, imbalance => $_->{imbalance} } } @$moves ],
    };
}

# Calls cut short by an alarm at growing delays (the first ones before the request is written,
# later ones while the answer is awaited), each on a usage object of its own.
sub interrupted_calls {
    my ($count) = @_;
    for my $i (1 .. $count) {
        my $usage = PVE::RS::ResourceScheduling::Static->new();
        $usage->add_node("n$_", 16, 64 * $GiB) for 1 .. 50;
        eval {
            local $SIG{ALRM} = sub { die "alarm\n" };
            Time::HiRes::ualarm(10 * 4**$i);
            $usage->score_nodes_to_start_service({ maxcpu => 1.0, maxmem => $GiB }) for 1 .. 100;
            Time::HiRes::ualarm(0);
        };
        Time::HiRes::ualarm(0);
    }
}

# The drop-in's settings as CRSBridge::Config reads them (none for the Rust binding): the file,
# and each setting not at its default with its value and where it comes from.
sub config {
    return undef if !PVE::RS::ResourceScheduling::Static->isa('CRSBridge::Scheduler');
    my %set;
    for my $key (CRSBridge::Config::names()) {
        next if CRSBridge::Config::source($key) eq 'default';
        my $value = CRSBridge::Config::get($key);
        $set{$key} = { value => ref $value ? join(' ', @$value) : "$value", source => CRSBridge::Config::source($key) };
    }
    return { file => CRSBridge::Config::file(), settings => \%set, log => CRSBridge::Config::get('log') };
}

# The server the drop-in talks to (none for the Rust binding).
sub server {
    return undef if !PVE::RS::ResourceScheduling::Static->isa('CRSBridge::Scheduler');
    my $pid = eval { CRSBridge::Connection->instance->server_pid };
    return {
        pid => $pid,
        command => scalar(eval { CRSBridge::Process::command() }),
        stderr => defined $pid ? readlink("/proc/$pid/fd/2") : undef,
    };
}
