# frozen_string_literal: true

require_relative "runner"

module Evix
  module Examples
    # A chat room. Every line a client sends goes to all the others as
    # "name: line". New clients are called guest1, guest2, ...; `/nick NAME`
    # renames. A client silent for `idle` seconds is kicked. The first line a
    # new client gets is DEFAULT_WELCOME, or the content of the welcome file
    # when one is given (re-read on SIGHUP).
    #
    # Nobody waits on another client's socket: a line goes to each member
    # by Evix::IO#try_write, whose outbox the loop writes in the background,
    # so a slow reader only delays itself, never the room. What goes out is
    # bytes: a member's name and lines are bytes as they came, the welcome
    # file is read as bytes, and a line said to the room is made once and
    # handed to every member. An outbox holds at most +max_outbox+ bytes (the
    # kernel's socket buffer comes on top): a member whose outbox would grow
    # past that is disconnected at once, with one line on stderr and a notice
    # to the room, so a client that never reads cannot make the server's
    # memory grow without bound. A burst bigger than the outbox therefore
    # disconnects even a client that reads, if it cannot keep up.
    class Chat
      include Runner

      DEFAULT_WELCOME = "Welcome to the evix chat! Type /nick NAME to choose a name."
      NAME = /\A\S{1,32}\z/
      MAX_LINE = 4096 # bytes; a longer line arrives in pieces, so memory per client stays bounded
      MAX_OUTBOX = 1024 * 1024 # bytes waiting to be sent to one member

      # @raise [ArgumentError] unless max_outbox is a positive Integer
      # @param welcome [String, nil] a file whose text greets new clients; nil: DEFAULT_WELCOME
      def initialize(host: "127.0.0.1", port: 7001, idle: 60, welcome: nil, max_outbox: MAX_OUTBOX, verbose: false)
        unless max_outbox.is_a?(Integer) && max_outbox.positive?
          raise ArgumentError, "max_outbox must be a positive Integer number of bytes (got #{max_outbox.inspect})"
        end

        @host = host
        @port = port
        @idle = idle
        @max_outbox = max_outbox
        @welcome_path = welcome
        @welcome = DEFAULT_WELCOME
        @verbose = verbose
        @members = {} # name => Member
        @guests = 0
      end

      # @return [Evix::TCPServer]
      def start(loop)
        @loop = loop
        reload_welcome
        loop.add_signal(:HUP) { reload_welcome }
        Evix::TCPServer.new(loop, @host, @port, write_high_water: @max_outbox) do |client|
          logged(client) { serve(client) }
        end
      end

      # Tells everyone, then drains: every queued line is written before the
      # connections close.
      def stop(server)
        broadcast("* the server is shutting down")
        super
      end

      # Re-reads the welcome file, if one was given; a missing or unreadable
      # one keeps the old text.
      def reload_welcome
        return unless @welcome_path

        @welcome = File.binread(@welcome_path).chomp
      rescue SystemCallError, IOError => e
        warn "evix chat: keeping the current welcome text: #{e.message}"
      end

      private

      def serve(client)
        member = join(client)
        while (line = client.gets("\n", MAX_LINE, timeout: @idle))
          hear(member, line.chomp)
        end
      rescue Evix::TimeoutError
        member.say("* you were idle for #{format("%g", @idle)}s, bye")
        leave(member, "was kicked (idle for #{format("%g", @idle)}s)")
      rescue Evix::ClosedError, SystemCallError
        if member&.overflowed?
          warn "evix chat: disconnected #{member.name}: more than #{@max_outbox} bytes waiting to be sent " \
               "(it does not read)"
          leave(member, "was disconnected (it did not read)")
        else
          leave(member, "left")
        end
      ensure
        # Whatever ended the connection (an error goes on to the server's
        # on_error), the member leaves the room.
        leave(member, "left") if member
        member&.finish # the connection closes once this member's queue is written
      end

      def join(client)
        member = Member.new(client, guest_name)
        member.say(@welcome) unless @welcome.empty?
        member.say("* you are #{member.name}")
        broadcast("* #{member.name} joined")
        @members[member.name] = member
      end

      def leave(member, why)
        return unless @members.delete(member.name)

        broadcast("* #{member.name} #{why}")
      end

      def hear(member, line)
        return if line.strip.empty?

        command, argument = line.split(" ", 2)
        case command
        when "/nick" then nick(member, argument.to_s.strip)
        when %r{\A/} then member.say("* unknown command #{command} (try /nick NAME)")
        else broadcast("#{member.name}: #{line}", except: member)
        end
      end

      def nick(member, name)
        if !name.match?(NAME)
          member.say("* usage: /nick NAME (no spaces, at most 32 characters)")
        elsif @members.key?(name)
          member.say("* the name #{name} is taken")
        else
          old = member.name
          @members[name] = @members.delete(old)
          member.name = name
          member.say("* you are now #{name}")
          broadcast("* #{old} is now #{name}", except: member)
        end
      end

      def broadcast(line, except: nil)
        text = Member.text(line)
        @members.each_value { |member| member.queue(text) unless member.equal?(except) }
      end

      def guest_name
        loop do
          @guests += 1
          name = "guest#{@guests}"
          return name unless @members.key?(name)
        end
      end

      # One client's outgoing side, over Evix::IO#try_write: what the kernel
      # does not take at once waits in the connection's own queue (at most
      # max_outbox bytes, its write_high_water) and the loop writes it in the
      # background, so `say` never waits and a member costs no task of its
      # own. A member whose queue would pass max_outbox is disconnected; so
      # is one that is gone (the write's error), at the first line said to
      # it. When it leaves, what is queued gets WRITE_TIMEOUT seconds to go.
      class Member
        WRITE_TIMEOUT = 30

        attr_accessor :name

        # +line+ as it goes out: bytes, with its newline, frozen so that
        # every member can be handed the same String.
        def self.text(line)
          "#{line}\n".force_encoding(Encoding::BINARY).freeze
        end

        def initialize(client, name)
          @client = client
          @name = name
          @overflowed = false
          @finishing = false
        end

        # Queues a line for this client.
        def say(line)
          queue(Member.text(line))
        end

        # Queues +text+ (made by Member.text); disconnects the client if its
        # queue would overflow or it is gone.
        def queue(text)
          return if @finishing

          overflow unless @client.try_write(text)
        rescue Evix::ClosedError, SystemCallError
          drop
        end

        # Whether it was disconnected for an outbox over the limit.
        def overflowed?
          @overflowed
        end

        # Takes no more lines and waits until the queued ones are with the
        # kernel (or the client is gone, or takes nothing for WRITE_TIMEOUT).
        def finish
          return if @finishing

          @finishing = true
          @client.flush(timeout: WRITE_TIMEOUT)
        rescue Evix::ClosedError, Evix::TimeoutError, SystemCallError
          drop
        end

        private

        def overflow
          @overflowed = true
          drop
        end

        # Gone or stuck: drop what it will never read. Closing wakes the
        # connection's reader with Evix::ClosedError, so it leaves the room.
        def drop
          @finishing = true
          @client.close
        end
      end
    end
  end
end
