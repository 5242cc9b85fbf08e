#!/usr/bin/perl
# The adds and the answers read without JSON::PP (CRSBridge::Codec::decode_answer) under what a
# daemon does to them: alarms whose handler dies, objects dropped or poisoned between adds,
# perl -T. Each subtest failed before its fix (found in review).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Scalar::Util qw(weaken);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;
use PVE::RS::ResourceScheduling::Dynamic;

my @NODES = qw(a b c);
sub service { return { stats => { maxcpu => 1, maxmem => GiB }, running => 1, 'current-node' => $_[0] } }

sub cluster {
    my $usage = PVE::RS::ResourceScheduling::Static->new();
    $usage->add_node($_, 16, 64 * GiB) for @NODES;
    return $usage;
}

# Lines the client queues to the server, for the subtests that look at what is sent.
my @queued;
{
    no warnings 'redefine';
    my $queue = \&CRSBridge::Process::queue;
    *CRSBridge::Process::queue = sub { push @queued, $_[1]; goto &$queue };
}

subtest 'an alarm in the drop of an object: the object is still released' => sub {
    my $other = cluster();
    $other->calculate_node_imbalance;
    my @warnings;
    {
        local $SIG{__WARN__} = sub { push @warnings, @_ };
        my $usage = cluster();
        $usage->add_service("vm:$_", service($NODES[ $_ % 3 ])) for 1 .. 5;
        no warnings 'redefine';
        my $release = \&CRSBridge::Connection::release;
        # Where an alarm of run_with_timeout may land: right after the release.
        local *CRSBridge::Connection::release = sub { $release->(@_); die "got timeout\n" };
        undef $usage;
    }
    is(scalar(@warnings), 1, 'the alarm became a warning (in cleanup)');
    @queued = ();
    kill 'KILL', server_pid();
    server_call($other, 'calculate_node_imbalance');    # a new server: every live object is restored
    my $restored = () = join('', @queued) =~ /"method":"scheduler\.new"/g;
    is($restored, 1, 'only the object still alive is restored (the dropped one is not live any more)');
};

subtest 'an object poisoned between its adds: the next add dies, as at 28ba640' => sub {
    # The server refuses a buffered add_node the client accepted (a wrapper renames node zz to a,
    # a duplicate): a stand-in for any refusal of a buffered mutation.
    my $dir = tempdir(CLEANUP => 1);
    my $server = join(' ', @{ CRSBridge::Process::command() });
    open(my $fh, '>', "$dir/server") or die;
    print $fh "#!/bin/sh\nsed -u 's/\"add_node\",\"zz\"/\"add_node\",\"a\"/' | exec $server\n";
    close $fh;
    chmod 0755, "$dir/server";
    local $ENV{CRS_BRIDGE_COMMAND} = "$dir/server";
    kill 'KILL', server_pid() if server_pid();
    my $usage = cluster();
    $usage->add_node('zz', 16, 64 * GiB);
    $usage->add_service('vm:1', service('a'));
    my $dynamic = PVE::RS::ResourceScheduling::Dynamic->new();    # a call (first dynamic object): the refusal is read
    like(error_of { $usage->add_service('vm:2', service('a')) }, qr/refused a buffered add_node/,
        'the add after the refusal dies saying why');
    kill 'KILL', server_pid();
};

subtest 'a dropped object leaves nothing of its mirror behind' => sub {
    my ($res, $nodes);
    {
        my $usage = cluster();
        $usage->add_service("vm:$_", service('a')) for 1 .. 1000;
        $usage->calculate_node_imbalance;
        ($res, $nodes) = @{ $usage->{_crs}{mirror} }{qw(res nodes)};
        weaken($res);
        weaken($nodes);
    }
    ok(!$res && !$nodes, 'its resources and nodes are freed with it');
};

subtest 'perl -T: answers read without JSON::PP are tainted as JSON::PP leaves them' => sub {
    my $config = tempdir(CLEANUP => 1) . '/crs-bridge.conf';
    open(my $fh, '>', $config) or die;
    print $fh 'command: ' . join(' ', @{ CRSBridge::Process::command() }) . "\njson: PP\n";
    close $fh;
    my $program = q{$ENV{PATH} = '/usr/bin:/bin'; delete @ENV{qw(IFS CDPATH ENV BASH_ENV)};}
        . qq{\$ENV{CRS_BRIDGE_CONFIG} = '$config';} . q{
        use Scalar::Util qw(tainted); use PVE::RS::ResourceScheduling::Static;
        my $u = PVE::RS::ResourceScheduling::Static->new; $u->add_node($_, 16, 2**36) for qw(a b);
        $u->add_service('vm:1', { stats => { maxcpu => 1, maxmem => 2**30 }, running => 1, 'current-node' => 'a' });
        my $scored = $u->score_best_balancing_migration_candidates([{ leader => 'vm:1', resources => ['vm:1'], nodes => ['b'] }], 5);
        my $scores = $u->score_nodes_to_start_service({ maxcpu => 1, maxmem => 2**30 });
        print join(' ', map { tainted($_) ? 1 : 0 } $u->calculate_node_imbalance, $scored->[0]{migration}{sid},
            $scored->[0]{imbalance}, $scores->[0][1]);
    };
    local %ENV = %ENV;
    delete @ENV{ grep {/^CRS_BRIDGE_/} keys %ENV };
    open(my $out, '-|', $^X, '-T', "-I$FindBin::Bin/../lib", '-e', $program) or die;
    my $said = do { local $/; <$out> };
    close $out;
    is($said, '1 1 1 1', 'imbalance, scored sid and imbalance tainted like a node score (read by JSON::PP)');
};

subtest 'an alarm while an answer is decoded dies with the alarm, not as "not JSON" (pre-existing)' => sub {
    my $usage = cluster();
    my $die = 1;
    no warnings 'redefine';
    my $decode = \&CRSBridge::Connection::decode_answer;
    local *CRSBridge::Connection::decode_answer = sub { if ($die) { $die = 0; die "got timeout\n" } goto &$decode };
    is(error_of { $usage->calculate_node_imbalance }, "got timeout\n", "the handler's message");
};

subtest 'an alarm while a buffered remove is recorded: the mirror and the journal agree' => sub {
    my $usage = cluster();
    $usage->add_service('vm:1', service('a'));
    $usage->calculate_node_imbalance;
    local $SIG{ALRM} = sub { die "got timeout\n" };
    {
        # The alarm comes right after the mirror's change, before the journal entry (as it
        # can): it is handled once both are made.
        no warnings 'redefine';
        my $remove = \&CRSBridge::Mirror::remove_resource;
        local *CRSBridge::Mirror::remove_resource = sub { $remove->(@_); kill 'ALRM', $$; return };
        is(error_of { $usage->remove_service_usage('vm:1') }, "got timeout\n", 'the call dies with the alarm');
    }
    $usage->add_service('vm:1', service('b'));    # gone for the mirror: a new add
    is(error_of { $usage->calculate_node_imbalance }, '', 'the server took both (the object is usable)');
    my $journal = CRSBridge::Scheduler::_state($usage)->{mirror}->journal;
    is_deeply([ grep {/vm:1/} @$journal ], [ '["add_service","vm:1",{"stats":{"maxcpu":1,"maxmem":1073741824},'
        . '"running":true,"current-node":"a"}]', '["remove_service_usage","vm:1"]',
        '["add_service","vm:1",{"stats":{"maxcpu":1,"maxmem":1073741824},"running":true,"current-node":"b"}]' ],
        'the journal holds the remove');
};

done_testing();
