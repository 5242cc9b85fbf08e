#!/usr/bin/perl
# A server writing a lot to stderr never blocks the client: the client never reads the
# server's stderr (the server inherits the caller's, or appends to CRS_BRIDGE_LOG), and the
# real server keeps serving even when that stderr is a pipe nobody reads. Error messages quote
# only a short tail of a long log.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use POSIX ();
use Test::More;
use Time::HiRes ();
use CRSBridgeTest;
use FaultAid;
use CRSBridge::Connection;
use CRSBridge::Process;
use CRSBridge::Records qw(candidates_param);
use PVE::RS::ResourceScheduling::Dynamic;

my $CLASS = 'PVE::RS::ResourceScheduling::Dynamic';
my @SERVER = @{ CRSBridge::Process::command() };
my $DIR = tempdir(CLEANUP => 1);
my $FLOOD = 4 * 1024 * 1024;    # bytes before the server starts, and as many while it serves
my $FLOOD_COMMAND = join(' ', "$FindBin::Bin/bin/stderr-flood", $FLOOD, @SERVER);

sub build {
    my ($guests) = @_;
    my $usage = $CLASS->new();
    $usage->add_node("n$_", { cpu => $_, maxcpu => 16, mem => $_ * GiB, maxmem => 64 * GiB }) for 1 .. 4;
    for my $i (1 .. $guests) {
        $usage->add_resource("vm:$i", { stats => { cpu => 0.5, maxcpu => 2, mem => GiB, maxmem => 2 * GiB }, running => 1,
            'current-node' => 'n' . (1 + $i % 3) });
    }
    return $usage;
}

my $GUESTS = 3000;
my @CANDIDATES = map { { leader => "vm:$_", resources => ["vm:$_"], nodes => ['n4'] } } 1 .. 50;

# The drop-in's answers (as its methods return them), asked of the server each time (repeated
# queries would be answered from memory, see CRSBridge::Connection::query).
sub answers {
    my ($u) = @_;
    return [ server_call($u, 'calculate_node_imbalance'),
        server_call($u, 'score_best_balancing_migration_candidates',
            '"candidates":' . candidates_param(\@CANDIDATES) . ',"limit":5'),
        server_call($u, 'score_nodes_to_start_resource',
            '"resource_stats":{"cpu":1,"maxcpu":2,"mem":1073741824,"maxmem":1073741824}') ];
}

my $usage = build($GUESTS);
my $expected = answers($usage);

# Runs $code with this process's stderr (fd 2, which a new server inherits) sent to $path.
sub with_stderr_to {
    my ($path, $code) = @_;
    open(my $saved, '>&', \*STDERR) or die "dup stderr: $!";
    open(STDERR, '>', $path) or die "$path: $!";
    my @result = eval { $code->() };
    my $error = $@;
    open(STDERR, '>&', $saved) or die "restore stderr: $!";
    die $error if $error;
    return @result;
}

# Waits (up to 20 s) for the flood to have reached $path in full.
sub flooded {
    my ($path) = @_;
    for (1 .. 1000) {
        return 1 if (-s $path // 0) >= 2 * $FLOOD;
        Time::HiRes::sleep(0.02);
    }
    return 0;
}

subtest "a server flooding the caller's stderr (a file)" => sub {
    my $path = "$DIR/stderr";
    my @got = with_stderr_to($path, sub {
        local $ENV{CRS_BRIDGE_COMMAND} = $FLOOD_COMMAND;
        kill('KILL', server_pid());    # the next call starts the flooding server
        my @answers = map { answers($usage) } 1 .. 8;
        my $flooding = server_pid();
        kill('KILL', $flooding);       # back to the plain server on the next call
        return ($flooding, @answers);
    });
    my $flooding = shift @got;
    is_deeply(\@got, [ ($expected) x 8 ], 'every answer right');
    ok(flooded($path), "the server wrote its 2 x $FLOOD bytes to the caller's stderr");
    is_deeply(answers($usage), $expected, 'the next call works');
    isnt(server_pid(), $flooding, '... on a plain server');
};

subtest 'a server flooding CRS_BRIDGE_LOG' => sub {
    my $path = "$DIR/server.log";
    local $ENV{CRS_BRIDGE_LOG} = $path;
    local $ENV{CRS_BRIDGE_COMMAND} = $FLOOD_COMMAND;
    kill('KILL', server_pid());
    is_deeply([ map { answers($usage) } 1 .. 8 ], [ ($expected) x 8 ], 'every answer right');
    ok(flooded($path), 'the flood went to the log file');
    kill('KILL', server_pid());
};

subtest 'a caller whose stderr is a pipe nobody reads, the server tracing every message to it' => sub {
    pipe(my $err_read, my $err_write) or die "pipe: $!";
    pipe(my $result_read, my $result_write) or die "pipe: $!";
    my $child = fork() // die "fork: $!";
    if (!$child) {
        close($_) for $err_read, $result_read;
        open(STDERR, '>&', $err_write) or POSIX::_exit(2);
        $ENV{CRS_BRIDGE_COMMAND} = join(' ', @SERVER, '--trace', '-', '--log-level', 'debug');
        my $same = 0;
        for (1 .. 5) {
            my $copy = build($GUESTS);    # a 3000-mutation batch, traced, every time
            $same++ if Test::More::eq_array(answers($copy), $expected) && Test::More::eq_array(answers($usage), $expected);
        }
        my $full = select(undef, my $bits = _bits(fileno(STDERR)), undef, 0) == 0 ? 1 : 0;
        print {$result_write} "$same $full\n";
        close($result_write);
        CRSBridge::Connection->instance->shutdown;
        POSIX::_exit(0);
    }
    close($_) for $err_write, $result_write;
    my ($how, $status) = watchdog(120, 'the session with a blocked stderr', sub { wait_gone($child, 110) });
    is_deeply([ $how, $status ], [ 'reaped', 0 ], 'the session ended normally');
    my ($same, $full) = split ' ', scalar(<$result_read>) // '';
    is($same, 5, 'every answer right');
    is($full, 1, 'at the end the pipe was full: the server could not write all it wanted');
    $err_read->blocking(0);
    my $pending = 0;
    while (my $n = sysread($err_read, my $chunk, 1 << 16)) { $pending += $n }
    note("$pending bytes were waiting in the pipe");
};

subtest 'a long log: the error message quotes only its short tail' => sub {
    my $path = "$DIR/long.log";
    local $ENV{CRS_BRIDGE_LOG} = $path;
    local $ENV{CRS_BRIDGE_COMMAND} = "$^X -e 'print STDERR q(x) x 3_000_000, qq(\\nfirst words\\n\\nlast words\\n); exit 1'";
    my $error = error_of { $CLASS->new() };
    like($error, qr/^crs-bridge: cannot start the server '.*': it ended before answering \(last lines of \Q$path\E: \.\.\.x+ \| first words \| last words\)\n\z/,
        'the last lines, a long one shortened');
    cmp_ok(length $error, '<', 1000, 'a short message');
};

is_deeply(answers($usage), $expected, 'the object still answers as before');

sub _bits {
    my $bits = '';
    vec($bits, $_[0], 1) = 1;
    return $bits;
}

done_testing();
