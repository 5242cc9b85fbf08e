#!/usr/bin/perl
# A long candidate list is scored in parts (scheduler.stage_candidates while the next part is
# rendered, then scheduler.score_staged_candidates): the answers are those of the whole list
# sent at once, errors die as that call dies, and a server dying on the way changes nothing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Codec qw(json_int);
use CRSBridge::Process;
use CRSBridge::Records qw(candidates_param);
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

# Count the requests written to the server, by method, and the bundles of each staged part.
my (%sent, @part_sizes);
{
    no warnings 'redefine';
    my $queue = \&CRSBridge::Process::queue;
    *CRSBridge::Process::queue = sub {
        my ($self, $bytes) = @_;
        $sent{$1}++ while $bytes =~ /"method":"([^"]+)"/g;
        push @part_sizes, scalar(() = $bytes =~ /"leader":/g) if $bytes =~ /"method":"scheduler\.stage_candidates"/;
        return $queue->(@_);
    };
}

my @nodes = map { "node$_" } 1 .. 12;
my $guests = 1300;    # over the size from which lists go in parts, not a multiple of a part

sub cluster {
    my ($class) = @_;
    my $usage = $class->new();
    my $static = $class =~ /Static/;
    for my $i (0 .. $#nodes) {
        $static ? $usage->add_node($nodes[$i], 16 + 4 * ($i % 3), 64 * GiB)
            : $usage->add_node($nodes[$i], { cpu => 0.5 * $i, maxcpu => 16, mem => $i * GiB, maxmem => 64 * GiB });
    }
    for my $g (0 .. $guests - 1) {
        my $node = $nodes[ ($g * 7) % 5 ];    # the first nodes carry everything
        my %stats = (maxcpu => 1 + $g % 4, maxmem => (1 + $g % 3) * GiB);
        $static ? $usage->add_service("vm:$g", { stats => \%stats, running => 1, 'current-node' => $node })
            : $usage->add_resource("vm:$g", { stats => { %stats, cpu => 0.25 * (1 + $g % 5), mem => GiB },
                running => 1, 'current-node' => $node });
    }
    return $usage;
}

# Compact candidates as the HA manager builds them: one bundle per guest (some of two guests),
# every other node as a target.
sub candidates {
    my @list;
    for my $g (0 .. $guests - 1) {
        my $node = $nodes[ ($g * 7) % 5 ];
        my @members = ("vm:$g", ($g % 50 == 0 && $g + 5 < $guests && ($g + 5) * 7 % 5 == $g * 7 % 5) ? "vm:" . ($g + 5) : ());
        push @list, { leader => "vm:$g", resources => \@members, nodes => [ grep { $_ ne $node } @nodes ] };
    }
    return \@list;
}

# The method called with the whole list in one request, as short lists always are.
sub whole {
    my ($usage, $method, $list, $limit) = @_;
    return server_call($usage, $method, '"candidates":' . candidates_param($list) . ',"limit":' . json_int($limit));
}

# The parts: a small first one (the server starts early), each next one twice the last, up to
# the most: 125, 250, 500, 425 of the 1300.
my ($first, $most) = (CRSBridge::Scheduler::FIRST_PART, CRSBridge::Scheduler::PART);
my @parts = ($first, 2 * $first, $most, $guests - 3 * $first - $most);

for my $class ('PVE::RS::ResourceScheduling::Static', 'PVE::RS::ResourceScheduling::Dynamic') {
    subtest $class => sub {
        my $usage = cluster($class);
        my $list = candidates();
        for my $method ('score_best_balancing_migration_candidates', 'score_best_balancing_migration_candidates_topsis') {
            for my $limit (0, 1, 7, 100_000) {
                (%sent, @part_sizes) = ();
                my $got = $usage->$method($list, $limit);
                is_deeply(\@part_sizes, \@parts, "$method, limit $limit: sent in parts of @parts");
                is($sent{'scheduler.score_staged_candidates'}, 1, '... and scored as one');
                is_deeply($got, whole($usage, "$method", $list, $limit), '... with the answer of the whole list');
            }
        }
        my $short = [ @$list[ 0 .. 99 ] ];
        %sent = ();
        is_deeply($usage->score_best_balancing_migration_candidates($short, 3),
            whole($usage, 'score_best_balancing_migration_candidates', $short, 3), 'a short list: the same');
        ok(!$sent{'scheduler.stage_candidates'}, '... sent whole');
    };
}

my $usage = cluster('PVE::RS::ResourceScheduling::Static');
my $list = candidates();
my $expected = $usage->score_best_balancing_migration_candidates($list, 3);

subtest 'errors die as for the whole list' => sub {
    my @bad = @$list;
    $bad[1200] = { %{ $bad[1200] }, leader => 'vm:unknown', resources => ['vm:unknown'] };
    is(error_of { $usage->score_best_balancing_migration_candidates(\@bad, 1) },
        "leader 'vm:unknown' is not present in the cluster usage\n", "a server's error in the last part");
    @bad = @$list;
    $bad[700] = { %{ $bad[700] }, nodes => [ $bad[700]{nodes}[0], 'node99' ] };
    my $error = error_of { $usage->score_best_balancing_migration_candidates(\@bad, 1) };
    like($error, qr/^Invalid params: candidates\[700\]\.nodes\[1\]: target node 'node99' does not exist/,
        'an unknown target, named at its place in the whole list');
    @bad = @$list;
    $bad[900] = { %{ $bad[900] }, resources => [ 42 ] };
    is(error_of { $usage->score_best_balancing_migration_candidates(\@bad, 1) },
        error_of { $usage->score_best_balancing_migration_candidates([ $bad[900] ], 1) },
        "a value perlmod refuses, in a later part: the short list's error");
    is(error_of { $usage->score_best_balancing_migration_candidates($list, -1) },
        error_of { $usage->score_best_balancing_migration_candidates([ $list->[0] ], -1) }, 'a bad limit: the same');
    is_deeply($usage->score_best_balancing_migration_candidates($list, 3), $expected, 'and the next call is answered');
};

subtest 'mutations between two scorings are seen' => sub {
    my $other = cluster('PVE::RS::ResourceScheduling::Static');
    $other->score_best_balancing_migration_candidates($list, 3);
    $other->add_node('node13', 64, 256 * GiB);
    my @more = map { { %$_, nodes => [ @{ $_->{nodes} }, 'node13' ] } } @$list;
    is_deeply($other->score_best_balancing_migration_candidates(\@more, 3),
        whole($other, 'score_best_balancing_migration_candidates', \@more, 3), 'the new node is a target');
};

subtest 'a server dying while the parts are scored' => sub {
    my $dir = tempdir(CLEANUP => 1);
    my @server = @{ CRSBridge::Process::command() };
    for my $method ('stage_candidates', 'score_staged_candidates') {
        local $ENV{CRS_BRIDGE_COMMAND} = join(' ', "$FindBin::Bin/bin/crash-proxy", 'once', "$dir/$method",
            $method, @server);
        kill('KILL', server_pid());    # the next server is started through the proxy
        is_deeply($usage->score_best_balancing_migration_candidates($list, 3), $expected,
            "killed during $method: the same answer from a new server");
        ok(-e "$dir/$method", '... it did die');
    }
    kill('KILL', server_pid());
};

done_testing();
