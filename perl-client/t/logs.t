#!/usr/bin/perl
# Where the server's log goes. Under a daemon its stderr is /dev/null (or closed): it logs to
# syslog then, and always with the setting 'log: syslog'; each message tagged with the ident
# crs-bridge[SERVER PID] and "[client PID]" (this process). With a usable stderr it logs there,
# and with 'log: FILE' it appends to the file. syslog here is a unix datagram socket this test
# binds (the server's --syslog-socket), not the machine's.
#
# What the server logs: an internal error (the test method debug.raise of --debug-methods)
# with its traceback.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Spec;
use File::Temp qw(tempdir);
use IO::Socket::UNIX;
use Socket qw(SOCK_DGRAM);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Connection;
use CRSBridge::Process;

my $DIR = tempdir(CLEANUP => 1);
my $SOCKET = "$DIR/log.sock";
my $syslog = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => $SOCKET) or die "cannot bind $SOCKET: $!";
my @SERVER = @{ CRSBridge::Process::command() };
$ENV{CRS_BRIDGE_COMMAND} = join(' ', @SERVER, '--debug-methods', '--syslog-socket', $SOCKET);

# Starts a new server with fd 2 as $how says ('null', 'closed', or a file path), then makes it
# log an internal error; returns the server's pid.
sub provoke {
    my ($how) = @_;
    my $conn = CRSBridge::Connection->instance;
    $conn->shutdown;
    open(my $saved, '>&', \*STDERR) or die "dup stderr: $!";
    if ($how eq 'closed') {
        close(STDERR);
    } else {
        open(STDERR, '>>', $how eq 'null' ? File::Spec->devnull : $how) or die "stderr: $!";
    }
    my $answer = eval { $conn->call(undef, 'debug.raise', '{}') };
    my $error = $@;
    open(STDERR, '>&', $saved) or die "restore stderr: $!";
    like($error, qr/server error -32603/, 'the server answered the internal error');
    return $conn->server_pid;
}

# The next datagram on the test's syslog socket (waits up to 20 s).
sub next_message {
    my $bits = '';
    vec($bits, fileno($syslog), 1) = 1;
    return undef if !select(my $ready = $bits, undef, undef, 20);
    $syslog->recv(my $message, 65536);
    return $message;
}

sub check_syslog {
    my ($server, $name) = @_;
    my $message = next_message() // '';
    # <27>: facility daemon (3) * 8 + severity err (3).
    like($message, qr/^<27>crs-bridge\[$server\]: \[client $$\] ERROR: internal error \(a bug in crs-bridge\)/,
        "$name: the error reached syslog, tagged with the server's and the client's pids");
    like($message, qr/debug\.raise: deliberate failure/, "$name: ... with its traceback");
}

subtest 'stderr is /dev/null: syslog' => sub {
    check_syslog(provoke('null'), '/dev/null');
};

subtest 'stderr is closed: syslog' => sub {
    check_syslog(provoke('closed'), 'closed');
};

subtest "'log: syslog' with a usable stderr: syslog" => sub {
    local $ENV{CRS_BRIDGE_LOG} = 'syslog';
    check_syslog(provoke("$DIR/unused-stderr"), 'syslog setting');
    ok(!-s "$DIR/unused-stderr", 'nothing on stderr');
};

subtest 'a usable stderr: the log is there' => sub {
    my $path = "$DIR/stderr";
    my $server = provoke($path);
    CRSBridge::Connection->instance->shutdown;    # the server's log is complete once it ended
    my $text = do { local (@ARGV, $/) = ($path); <> };
    like($text, qr/^crs-bridge\[$server\] \[client $$\] ERROR: internal error \(a bug in crs-bridge\)/m,
        "the error on stderr, tagged with the server's and the client's pids");
};

subtest "'log: FILE': appended to the file" => sub {
    my $path = "$DIR/server.log";
    local $ENV{CRS_BRIDGE_LOG} = $path;
    my $server = provoke(File::Spec->devnull);
    CRSBridge::Connection->instance->shutdown;
    my $text = do { local (@ARGV, $/) = ($path); <> };
    like($text, qr/^crs-bridge\[$server\] \[client $$\] ERROR: internal error \(a bug in crs-bridge\)/m,
        'the error in the file although stderr is /dev/null');
};

done_testing();
