#!/usr/bin/perl
# HA rounds from the project's simulator (perl-client/t/lib/HASim.pm) with the flight recorder on,
# for tests/test_review_ha.py: reads a scenario (JSON file ARGV[0]), runs its rounds through the
# Perl drop-in (the recorder writes one file per round into CRS_BRIDGE_RECORD), and prints one
# JSON object: `real`, each round's report (imbalance, hold counter, the gate that decided, the
# move), and with `what-if` settings in the scenario `what-if`, the reports of a second simulator
# with those settings that judges every round on the state the first one had (its own moves are
# not carried on), recorder off.
#
# Scenario: mode, nodes (name -> {maxcpu, maxmem, cpu, mem}), services (sid -> HASim's service),
# rounds, settings ({threshold, hold_duration, margin, method}), what-if (the same keys),
# events ({round -> [[service|node, name, key, value], ...]}, applied before that round).

use strict;
use warnings;

use File::Basename qw(dirname);
use lib dirname(__FILE__) . '/../../perl-client/lib', dirname(__FILE__) . '/../../perl-client/t/lib';

use JSON::PP;
use Storable qw(dclone);
use HASim;

my $json = JSON::PP->new->canonical;

sub read_scenario {
    my ($path) = @_;
    open(my $fh, '<:raw', $path) or die "cannot read $path: $!\n";
    local $/;
    return $json->decode(<$fh>);
}

sub apply_events {
    my ($sim, $events) = @_;
    for my $event (@{ $events // [] }) {
        my ($kind, $name, $key, $value) = @$event;
        my $table = $kind eq 'node' ? $sim->{nodes} : $sim->services;
        die "unknown $kind '$name' in an event\n" if !$table->{$name};
        $table->{$name}{$key} = $value;
    }
    return;
}

# A round's report with its numbers as 17-digit strings: JSON::PP writes numbers with 15
# digits, which would lose the last bits the comparison is about.
sub report_of {
    my ($report) = @_;
    my $move = $report->{move};
    my %exact = map { defined $report->{$_} ? ($_ => exact($report->{$_})) : () } qw(imbalance relative);
    return { %$report, %exact, move => $move ? { %$move, expected => exact($move->{expected}) } : undef };
}

sub exact { return sprintf('%.17g', $_[0]) }

my $scenario = read_scenario($ARGV[0] // die "usage: ha_rounds.pl SCENARIO.json\n");
my %common = (mode => $scenario->{mode}, nodes => $scenario->{nodes}, services => $scenario->{services});
my $real = HASim->new(%common, %{ $scenario->{settings} // {} });
my $shadow = $scenario->{'what-if'} && HASim->new(%common, %{ $scenario->{'what-if'} });
my (@real, @shadow);
for my $round (1 .. $scenario->{rounds}) {
    apply_events($real, $scenario->{events}{$round});
    my $before = dclone({ nodes => $real->{nodes}, services => $real->services });
    push @real, report_of($real->round);    # its usage object is dropped, and recorded, here
    next if !$shadow;
    local $ENV{CRS_BRIDGE_RECORD} = '';
    @$shadow{qw(nodes services round)} = (@$before{qw(nodes services)}, $round - 1);
    push @shadow, report_of($shadow->round);
}
print $json->encode({ real => \@real, ($shadow ? ('what-if' => \@shadow) : ()) }), "\n";
