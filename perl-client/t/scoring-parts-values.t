#!/usr/bin/perl
# A long candidate list is scored in parts, and whenever the server refuses a part the whole
# list is sent again, rendered exactly (scoring-parts.t). Whatever the caller's values, and
# however the parts are rendered, the outcome must be the whole list's: the same answer, or the
# same error. The cluster has names for the odd values below ('inf', '42', '7', ...), so that a
# rendering of a part that the exact path would refuse, or render as another string, would be
# accepted by the server and show as a different outcome. (Rendering the parts with
# Cpanel::JSON::XS was tried: it changes the targets of references to numbers, which then pass
# for strings, unless each name is checked first, which costs what the exact rendering costs.)
# Run with CRS_BRIDGE_JSON=XS and =PP.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Scalar::Util qw(dualvar);
use Tie::Array;
use Tie::Hash;
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;
use CRSBridge::Records qw(candidates_param);
use PVE::RS::ResourceScheduling::Static;

my $METHOD = 'score_best_balancing_migration_candidates';

# Count the whole-list calls: the fallback after a refused part.
my $whole_calls = 0;
{
    no warnings 'redefine';
    my $queue = \&CRSBridge::Process::queue;
    *CRSBridge::Process::queue = sub {
        $whole_calls++ if $_[1] =~ /"method":"scheduler\.$METHOD"/;
        return $queue->(@_);
    };
}

# Node names that a rendering gone wrong could produce from the odd values below.
my @odd_nodes = ("n\xfc", "n\x{263a}", qq(n"q\\\tx), 'inf', 'nan', '7');
my @nodes = ((map {"node$_"} 1 .. 4), @odd_nodes);
my $guests = 1100;    # scored in parts: 125, 250, 500, 225

my $usage = PVE::RS::ResourceScheduling::Static->new();
$usage->add_node($_, 16, 64 * GiB) for @nodes;
my @sids = ((map {"vm:$_"} 0 .. $guests - 2), '42');    # a sid that a number could pass for
for my $i (0 .. $#sids) {
    $usage->add_service($sids[$i],
        { stats => { maxcpu => 1 + $i % 3, maxmem => GiB }, running => 1, 'current-node' => $nodes[ $i % 2 ] });
}

# A bundle per guest, every other node a target.
sub plain_list {
    my @list;
    for my $i (0 .. $#sids) {
        my $current = $nodes[ $i % 2 ];
        push @list, { leader => $sids[$i], resources => [ $sids[$i] ], nodes => [ grep { $_ ne $current } @nodes ] };
    }
    return \@list;
}

# A maker of lists with bundle $at changed by $change (called with a copy of the bundle's hash).
sub changed {
    my ($at, $change) = @_;
    return sub {
        my $list = plain_list();
        my %bundle = %{ $list->[$at] };
        $bundle{nodes} = [ @{ $bundle{nodes} } ];
        $list->[$at] = $change->(\%bundle);
        return $list;
    };
}

# The exact path's outcome for the whole list: [answer] or [undef, error].
sub exact_outcome {
    my ($list) = @_;
    my $answer = eval { server_call($usage, $METHOD, '"candidates":' . candidates_param($list) . ',"limit":3') };
    return $answer ? [$answer] : [ undef, $@ ];
}

sub outcome {
    my ($list) = @_;
    my $answer = eval { $usage->$METHOD($list, 3) };
    return $answer ? [$answer] : [ undef, $@ ];
}

# Checks the outcome for the list &$build makes against the exact path's, and whether the parts
# were taken as rendered ($accepted: 1 yes, 0 no, undef: not checked). Each gets a
# list of its own: the exact path stringifies some numbers it reads (as "Inf", for one), and
# that must not decide what the other sees.
sub same_outcome {
    my ($name, $build, $accepted) = @_;
    my $want = exact_outcome($build->());
    $whole_calls = 0;
    my $got = outcome($build->());
    is_deeply($got, $want, "$name: the exact path's " . ($want->[0] ? 'answer' : "error ($want->[1])"));
    is($whole_calls, $accepted ? 0 : 1, '... the parts ' . ($accepted ? 'accepted' : 'refused')) if defined $accepted;
}

subtest 'plain bundles' => sub {
    same_outcome('plain bundles', \&plain_list, 1);
};

subtest 'strings of every kind' => sub {
    my ($bytes, $wide, $escaped) = @nodes[ 4, 5, 6 ];
    my $upgraded = $bytes;
    utf8::upgrade($upgraded);
    same_outcome('a Latin-1 byte string, an upgraded copy, a wide one, one with escapes',
        changed(700, sub { $_[0]{nodes} = [ $bytes, $upgraded, $wide, $escaped ]; $_[0] }), 1);
    same_outcome('a dualvar (perlmod takes its string)',
        changed(700, sub { $_[0]{nodes} = [ dualvar(5, 'node3') ]; $_[0] }), 1);
    same_outcome('a first bundle with such names', changed(0, sub { $_[0]{nodes} = [ $upgraded, $wide ]; $_[0] }), 1);
};

subtest 'values perlmod takes as strings, that an encoder may render otherwise' => sub {
    my $used = '7';
    my $number = $used + 0;    # a string Perl has used as a number: still a string to perlmod
    same_outcome('a string used as a number', changed(700, sub { $_[0]{nodes} = [$used]; $_[0] }));
    my $was_string = 'x';
    $was_string = 7;    # a number in a string's body: a string to perlmod
    same_outcome('a number assigned to a string', changed(700, sub { $_[0]{nodes} = [$was_string]; $_[0] }));
    my $leader = $sids[700];
    same_outcome('a leader behind a reference', changed(700, sub { $_[0]{leader} = \$leader; $_[0] }));
    same_outcome('nodes behind a reference', changed(700, sub { $_[0]{nodes} = \[ 'node3' ]; $_[0] }));
};

subtest 'bundles of every kind' => sub {
    same_outcome('extra keys', changed(700, sub { $_[0]{note} = 'x'; $_[0]{sid} = 'vm:1'; $_[0] }), 1);
    same_outcome('an extra key no encoder takes', changed(700, sub { $_[0]{code} = sub {1}; $_[0] }));
    same_outcome('a blessed bundle', changed(700, sub { bless $_[0], 'Some::Class' }));
    same_outcome('a bundle as an array (a struct to perlmod)',
        changed(700, sub { [ @{ $_[0] }{qw(leader resources nodes)} ] }));
    same_outcome('a tied bundle with tied lists', changed(700, sub {
        tie my %bundle, 'Tie::StdHash';
        tie my @nodes, 'Tie::StdArray';
        @nodes = @{ $_[0]{nodes} };
        %bundle = (%{ $_[0] }, nodes => \@nodes);
        \%bundle;
    }));
    my @cycle = ('node3');
    push @cycle, \@cycle;
    same_outcome('a cyclic list', changed(700, sub { $_[0]{nodes} = \@cycle; $_[0] }));
};

# (The exact path takes a number in a list of names for the number's string, where perlmod
# refuses it: the fast path's join has made it a string before the exact decoder sees it.)
subtest 'values perlmod refuses, that the cluster has names for' => sub {
    my $inf = 9**9**9;
    for my $case (
        # New hashes: a number stored into an element that held a string is a string to perlmod.
        [ 'a leader that is a number', sub { { leader => 42, resources => ['42'], nodes => ['node3'] } } ],
        [ 'a resource that is a number', sub { { leader => '42', resources => [42], nodes => ['node3'] } } ],
        [ 'a leader behind a reference to a number',
            sub { { leader => \(my $n = 42), resources => ['42'], nodes => ['node3'] } } ],
        [ 'a node behind a reference to a number', sub { $_[0]{nodes} = [ \(my $n = 7) ]; $_[0] } ],
        [ 'a leader that is a number, another key referring to it', sub {
            my $bundle = { leader => 42, resources => ['42'], nodes => ['node3'] };
            $bundle->{alias} = \$bundle->{leader};    # an encoder that looks at it must not change it
            return $bundle;
        } ],
        [ 'a node that is a number', sub { $_[0]{nodes} = [7]; $_[0] } ],
        [ 'a node that is a floating point number', sub { $_[0]{nodes} = [7.0]; $_[0] } ],
        [ 'an infinite node', sub { $_[0]{nodes} = [$inf]; $_[0] } ],
        [ 'a NaN node', sub { $_[0]{nodes} = [ -sin($inf) ]; $_[0] } ],
        [ 'an undefined node', sub { $_[0]{nodes} = [undef]; $_[0] } ],
        [ 'a node that is a boolean', sub { $_[0]{nodes} = [ !!1 ]; $_[0] } ],
        [ 'a false node (an empty name)', sub { $_[0]{nodes} = [ !!0 ]; $_[0] } ],
        [ 'a node behind a reference to 1', sub { $_[0]{nodes} = [ \1 ]; $_[0] } ],
        [ 'nodes as a hash', sub { $_[0]{nodes} = { node3 => 1 }; $_[0] } ],
        [ 'no leader', sub { delete $_[0]{leader}; $_[0] } ],
        [ 'an undefined bundle', sub {undef} ],
        [ 'a bundle that is a name', sub {'node3'} ],
    ) {
        my ($name, $change) = @$case;
        same_outcome("$name (in a later part)", changed(700, $change));
        same_outcome("$name (first of a part)", changed(125, $change));
        same_outcome("$name (first of all)", changed(0, $change));
    }
};

subtest 'expanded candidates where bundles are expected' => sub {
    # The server reads a list whose first element has no leader as expanded candidates.
    my $expanded = sub {
        my ($i) = @_;
        my $node = $nodes[ $i % 2 ];
        return { sid => $sids[$i], 'source-node' => $node, 'target-node' => $nodes[ 1 - $i % 2 ],
            stats => { cpu => 1, maxcpu => 1, mem => GiB, maxmem => GiB } };
    };
    same_outcome('all of them', sub { [ map { $expanded->($_) } 0 .. $#sids ] });
    same_outcome('a whole part of them', sub {
        my $list = plain_list();
        $list->[$_] = $expanded->($_) for 125 .. 374;    # the second part
        return $list;
    });
    same_outcome('a bundle with an expanded candidate\'s keys too', changed(125, sub {
        return { %{ $expanded->(125) }, leader => $sids[125], resources => [ $sids[125] ], nodes => ['node3'] };
    }));
};

done_testing();
