#!/usr/bin/perl
# Servers that cannot start or do not answer: clear messages, nothing hangs, and the next call
# with a working server works (with every object restored).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use Test::More;
use CRSBridgeTest;
use FaultAid;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;

my $CLASS = 'PVE::RS::ResourceScheduling::Static';

subtest 'servers that cannot start' => sub {
    {
        local $ENV{CRS_BRIDGE_COMMAND} = '/nonexistent/crs-bridge serve';
        like(error_of { $CLASS->new() },
            qr{^crs-bridge: cannot start the server '/nonexistent/crs-bridge serve': .*No such file or directory.*\n\z},
            'a command that does not exist');
    }
    {
        local $ENV{CRS_BRIDGE_COMMAND} = '';
        local $ENV{PATH} = '/nonexistent';
        like(error_of { $CLASS->new() }, qr/^crs-bridge: cannot start the server: 'crs-bridge' is not on PATH .*CRS_BRIDGE_COMMAND.*\n\z/,
            'crs-bridge not on PATH')
            if !-x CRSBridge::Config::FALLBACK_SERVER;
        is_deeply(CRSBridge::Process::command(), [ CRSBridge::Config::FALLBACK_SERVER, 'serve' ],
            'crs-bridge not on PATH: ' . CRSBridge::Config::FALLBACK_SERVER) if -x CRSBridge::Config::FALLBACK_SERVER;
    }
    {
        local $ENV{CRS_BRIDGE_COMMAND} = "$^X -e 'exit 3'";
        like(error_of { $CLASS->new() }, qr/^crs-bridge: cannot start the server '.*': it ended before answering \(its log went to stderr\b.*\)\n\z/,
            'a server that exits at once');
    }
    {
        local $ENV{CRS_BRIDGE_COMMAND} = "$^X -e 'sleep 60'";
        local $ENV{CRS_BRIDGE_START_TIMEOUT} = 1;
        like(error_of { $CLASS->new() }, qr/^crs-bridge: cannot start the server '.*': no answer within 1 s .*killed it\n\z/,
            'a server that never answers');
    }
    {
        local $ENV{CRS_BRIDGE_TIMEOUT} = 'soon';
        like(error_of { $CLASS->new() }, qr/^crs-bridge: CRS_BRIDGE_TIMEOUT must be a positive number of seconds, got 'soon'\n\z/,
            'a bad timeout setting');
    }
};

my $usage = $CLASS->new();
$usage->add_node($_, 8, 32 * GiB) for qw(a b);
$usage->add_service('vm:1', { stats => { maxcpu => 4, maxmem => 4 * GiB }, running => 1, 'current-node' => 'a' });
my $expected = $usage->calculate_node_imbalance;
ok($expected > 0, 'a working server after the failures');

subtest 'a server that stops answering' => sub {
    my $pid = server_pid();
    kill('STOP', $pid);
    $usage->add_service('vm:2', { stats => { maxcpu => 2, maxmem => GiB }, running => 1, 'current-node' => 'b' });
    local $ENV{CRS_BRIDGE_TIMEOUT} = 1;
    like(error_of { $usage->calculate_node_imbalance },
        qr/^crs-bridge: no answer from the server \(pid $pid\) within 1 s to scheduler\.calculate_node_imbalance; killed it, the next call starts a new one/,
        'a clear timeout message');
    my ($how) = wait_gone($pid, 20);
    like($how, qr/^(gone|zombie)$/, 'the hung server was killed (init reaps it)');
    delete local $ENV{CRS_BRIDGE_TIMEOUT};
    $usage->remove_service_usage('vm:2');
    is($usage->calculate_node_imbalance, $expected, 'the next call works on a new server, state restored');
    isnt(server_pid(), $pid, 'a new server');
};

done_testing();
